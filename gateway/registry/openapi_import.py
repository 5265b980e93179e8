"""Draft an adapter manifest from an OpenAPI 3 document, for an operator to finish and register.

Operator tooling, not on the request path: nothing here registers, accepts or calls anything. What the
document does not decide is left out of the draft and listed in ``problems``, never guessed. Each GET,
POST, PUT, PATCH and DELETE operation becomes a tool ``<name>_<operationId in snake_case>`` (``read`` for
GET) whose ``input_schema`` is one closed object of its path and query parameters and its JSON body's
properties (local ``$ref`` and ``allOf`` resolved), in the scalar subset of ``gateway.registry.schema``,
and whose ``output_schema`` is its 200/201 JSON response. The gateway sends GET and DELETE arguments as
the query and others as the JSON body, so a query parameter on a POST is a problem. Idempotency keys
(the header, or inputs named like one) are dropped: the gateway mints them.

``x-countersign`` on an operation, with the root's as defaults (``approval`` and ``write_contract``
merged key by key), declares ``access``, ``approval``, ``write_contract``, ``summary_template``,
``agent_text_fields``, ``untrusted_output_fields``, ``timeout_seconds``; the root may add ``credential``,
``signing_secret_env`` (only for a backend that still verifies identities with a shared key; absent,
the gateway's JWKS) and ``health_path``. With no problems, the draft is checked with
``AdapterManifest.model_validate`` and its errors become problems.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gateway.registry.manifest import NAME_PATTERN, AdapterManifest

__all__ = ["ImportResult", "draft_manifest"]

_METHODS = ("get", "post", "put", "patch", "delete")
_OP_KEYS = {"access", "approval", "write_contract", "summary_template", "agent_text_fields", "untrusted_output_fields"}
_OP_KEYS |= {"timeout_seconds"}
_DEFAULT_KEYS = ("access", "approval", "write_contract", "timeout_seconds")
_ROOT_ONLY_KEYS = ("credential", "signing_secret_env", "health_path")
_CONTRACT_KEYS = ("dedupes_on_key", "key_retention_seconds", "status_path", "reference_field")
_SCALARS = {"string", "integer", "number", "boolean"}
_SCALAR_KEYS = {"title", "description", "examples", "default", "format", "enum", "minLength", "maxLength", "pattern"}
_SCALAR_KEYS |= {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
_ANNOTATIONS = {"type", "nullable", "readOnly", "writeOnly", "deprecated", "xml", "externalDocs", "example"}
_KEY_LIKE = re.compile(r"idempot|^(?:dedupe?|deduplication)(?:key|token|id)$|^client(?:request)?token$")


@dataclass(frozen=True, kw_only=True, slots=True)
class ImportResult:
    """A draft manifest and what an operator must settle before registering it."""

    manifest: dict[str, Any]
    """JSON-ready, in the shape of `AdapterManifest`; complete only when `problems` is empty."""
    problems: tuple[str, ...]
    """What the document left undecided or a manifest cannot express; each starts with the tool or place."""
    skipped: tuple[str, ...]
    """What the document has and the draft deliberately leaves out (Idempotency-Key headers, HEAD, ...)."""
    notes: tuple[str, ...]
    """Decisions the importer made that an operator may want to change (generated tool names, ...)."""


def draft_manifest(document: Mapping[str, Any], *, name: str, base_url: str | None = None) -> ImportResult:
    """Draft the manifest of adapter ``name`` from OpenAPI 3 ``document``, reporting problems rather than raising.

    ``base_url`` overrides the document's first ``servers[].url``.
    """
    return _Importer(document, name).draft(base_url)


class _Importer:
    def __init__(self, document: Mapping[str, Any], name: str) -> None:
        self.document, self.name = document, name
        self.problems: list[str] = []
        self.skipped: list[str] = []
        self.notes: list[str] = []

    def draft(self, base_url: str | None) -> ImportResult:
        if not str(self.document.get("openapi", "")).startswith("3."):
            self.problems.append(f"not an OpenAPI 3 document (openapi: {str(self.document.get('openapi', ''))!r})")
        if not NAME_PATTERN.fullmatch(self.name):
            self.problems.append(f"adapter name {self.name!r} must match {NAME_PATTERN.pattern}")
        root = self._extension("x-countersign (root)", self.document, {*_DEFAULT_KEYS, *_ROOT_ONLY_KEYS})
        manifest: dict[str, Any] = {"base_url": self._base_url(base_url)}
        manifest |= {key: root[key] for key in _ROOT_ONLY_KEYS if key in root}
        defaults = {key: root[key] for key in _DEFAULT_KEYS if key in root}
        tools: dict[str, dict[str, Any]] = {}
        for path, item in (self.document.get("paths") or {}).items():
            for method, operation in item.items():
                where = f"{method.upper()} {path}"
                if method in ("head", "options", "trace"):
                    self.skipped.append(f"{where}: a manifest tool cannot call {method.upper()}")
                elif method in _METHODS:
                    tool = self._tool(where, method.upper(), path, operation, item.get("parameters", []), defaults)
                    if tool["name"] in tools:
                        self.problems.append(f"{where}: tool name {tool['name']!r} is taken; operation left out")
                    tools.setdefault(tool["name"], tool)
        if not tools:
            self.problems.append("no operation became a tool")
        manifest["tools"] = list(tools.values())
        if not self.problems:
            try:
                AdapterManifest.model_validate(manifest)
            except ValidationError as error:
                self.problems += [f"{_location(e['loc'])}: {e['msg']}" for e in error.errors()]
        problems, skipped, notes = tuple(self.problems), tuple(self.skipped), tuple(self.notes)
        return ImportResult(manifest=manifest, problems=problems, skipped=skipped, notes=notes)

    def _base_url(self, given: str | None) -> str:
        servers = self.document.get("servers") or [{}]
        url = given or str(servers[0].get("url", ""))
        for variable, spec in ({} if given else servers[0].get("variables") or {}).items():
            url = url.replace(f"{{{variable}}}", str(spec.get("default", "")))
        if not re.match(r"^https?://", url):
            self.problems.append(f"no absolute base URL (servers[0].url is {url!r}); pass base_url")
            return ""
        if not given and len(servers) > 1:
            self.notes.append(f"base_url is servers[0] of {len(servers)}: {url}")
        return url.rstrip("/")

    def _extension(self, where: str, holder: Mapping[str, Any], allowed: set[str]) -> dict[str, Any]:
        extension = holder.get("x-countersign", {})
        if not isinstance(extension, Mapping):
            self.problems.append(f"{where}: x-countersign must be an object")
            return {}
        if unknown := sorted(set(extension) - allowed):
            self.problems.append(f"{where}: unknown x-countersign key(s) {unknown}")
        return {key: value for key, value in extension.items() if key in allowed}

    def _tool(
        self, where: str, method: str, path: str, op: Mapping[str, Any], shared: Any, defaults: dict[str, Any]
    ) -> dict[str, Any]:
        name = f"{self.name}_{_snake(str(op.get('operationId') or f'{method} {path}'))}"
        if not op.get("operationId"):
            self.notes.append(f"{where}: no operationId; named {name}")
        op = self._inline(name, op)
        own = self._extension(name, op, _OP_KEYS)
        ext = defaults | own
        for key in ("approval", "write_contract"):
            if isinstance(defaults.get(key), Mapping) and isinstance(own.get(key), Mapping):
                ext[key] = defaults[key] | own[key]
        texts = [str(op[key]).strip() for key in ("summary", "description") if str(op.get(key) or "").strip()]
        if not texts:
            self.problems.append(f"{name}: no summary or description to tell the model what it does")
        tool: dict[str, Any] = {
            "name": name,
            "description": "\n\n".join(dict.fromkeys(texts)),
            "mode": "read" if method == "GET" else "write",
            "method": method,
            "path": path,
            "input_schema": self._input(name, method, path, op, self._inline(name, shared)),
            "output_schema": self._output(name, op.get("responses") or {}),
        }
        if "access" in ext:
            tool["access"] = ext["access"]
        else:
            self.problems.append(f"{name}: no access rule (x-countersign.access)")
        if method != "GET":
            self._write_parts(name, tool, ext)
        elif misplaced := [key for key in ("approval", "write_contract", "summary_template") if key in own]:
            self.problems.append(f"{name}: {misplaced} are for write tools; left out")
        tool |= {
            key: ext[key] for key in ("agent_text_fields", "untrusted_output_fields", "timeout_seconds") if key in ext
        }
        for field in tool.get("agent_text_fields", ()):
            if field not in tool["input_schema"]["properties"]:
                self.problems.append(f"{name}: agent_text_fields names {field!r}, which is not an input")
        for field in set(tool.get("untrusted_output_fields", ())) - _string_paths(tool["output_schema"], ""):
            self.problems.append(f"{name}: untrusted_output_fields names {field!r}, not a string output")
        return tool

    def _write_parts(self, name: str, tool: dict[str, Any], ext: Mapping[str, Any]) -> None:
        for key in ("approval", "summary_template"):
            if key in ext:
                tool[key] = ext[key]
            else:
                self.problems.append(f"{name}: a write without {key} (x-countersign.{key})")
        contract = ext.get("write_contract")
        if not isinstance(contract, Mapping) or "status_path" not in contract:
            self.problems.append(
                f"{name}: a write without a status lookup (x-countersign.write_contract.status_path); "
                "write_contract left out"
            )
        elif missing := [key for key in _CONTRACT_KEYS if key not in contract]:
            self.problems.append(f"{name}: write_contract lacks {missing}; left out")
        else:
            tool["write_contract"] = dict(contract)

    def _input(self, name: str, method: str, path: str, op: Mapping[str, Any], shared: Any) -> dict[str, Any]:
        properties: dict[str, Any] = {}
        required: list[str] = []
        in_query = method in ("GET", "DELETE")
        # Path-level parameters first, so an operation's own parameter of the same name and place wins.
        parameters = {(p.get("in"), p.get("name")): p for p in [*shared, *op.get("parameters", [])]}
        for (place, pname), parameter in parameters.items():
            must = place == "path" or parameter.get("required") is True
            if place == "header" and str(pname).lower() == "idempotency-key":
                self.skipped.append(f"{name}: header Idempotency-Key dropped (the gateway mints and sends the key)")
            elif place not in ("path", "query"):
                note = f"{name}: {place} parameter {pname!r} is not sent by manifest tools"
                (self.problems if must else self.skipped).append(note)
            elif _key_like(str(pname)):
                self._drop_key(name, f"{place} parameter {pname!r}", must)
            elif place == "query" and not in_query:
                self.problems.append(f"{name}: query parameter {pname!r} on a {method}; its arguments go in the body")
            elif (schema := self._clean(name, f"input.{pname}", parameter.get("schema", {}), False)) is not None:
                if "description" in parameter:
                    schema.setdefault("description", parameter["description"])
                properties[pname] = schema
                required += [pname] if must else []
        for placeholder in re.findall(r"{([^}]*)}", path):
            if placeholder not in properties:
                self.problems.append(f"{name}: path placeholder {{{placeholder}}} has no path parameter")
        body, body_required = self._body(name, op.get("requestBody"))
        if body and in_query:
            self.problems.append(f"{name}: a {method} with a request body; its arguments would go in the query")
        for prop, spec in body.items():
            if _key_like(prop):
                self._drop_key(name, f"body property {prop!r}", prop in body_required)
            elif prop in properties:
                place = next(place for place, pname in parameters if pname == prop)
                self.problems.append(f"{name}: body property {prop!r} clashes with the {place} parameter")
            elif spec.get("readOnly"):
                self.skipped.append(f"{name}: body property {prop!r} is readOnly")
            elif (schema := self._clean(name, f"input.{prop}", spec, False)) is not None:
                properties[prop] = schema
                required += [prop] if prop in body_required else []
        return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}

    def _drop_key(self, name: str, what: str, required: bool) -> None:
        self.skipped.append(f"{name}: {what} looks like an idempotency key; dropped (the gateway mints keys)")
        if required:
            self.problems.append(f"{name}: the service requires {what}; the gateway sends keys only as Idempotency-Key")

    def _body(self, name: str, body: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
        if body is None:
            return {}, []
        content = body.get("content") or {}
        schema = _merge_all_of(content[media].get("schema", {})) if (media := _json_media(content)) else None
        if schema is None or schema.get("type", "object") != "object":
            self.problems.append(f"{name}: the request body is not a JSON object; it cannot become arguments")
            return {}, []
        required = list(schema.get("required", [])) if body.get("required") is True else []
        return dict(schema.get("properties") or {}), required

    def _output(self, name: str, responses: Mapping[Any, Any]) -> dict[str, Any]:
        for status in ("200", "201"):
            content = responses.get(status, responses.get(int(status), {})).get("content") or {}
            if (media := _json_media(content)) is not None and "schema" in content[media]:
                schema = self._clean(name, "output", content[media]["schema"], True)
                if schema is not None and schema.get("type") == "object":
                    return schema
                self.problems.append(f"{name}: the {status} response is not a JSON object")
                return {"type": "object"}
        self.problems.append(f'{name}: no JSON schema for a 200 or 201 response; output_schema is {{"type": "object"}}')
        return {"type": "object"}

    def _clean(self, name: str, where: str, schema: Any, output: bool) -> dict[str, Any] | None:
        """``schema`` in the manifest subset, or None (with a problem) when it cannot be expressed."""
        schema = _merge_all_of(schema)
        if any(key in schema for key in ("oneOf", "anyOf", "not")):
            self.problems.append(f"{name}: {where} uses oneOf/anyOf/not, which a manifest schema cannot express")
            return None
        kinds = schema.get("type", "object" if "properties" in schema else None)
        kinds = [k for k in (kinds if isinstance(kinds, list) else [kinds]) if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
        if output and kind == "object":
            properties = {p: s for p, s in (schema.get("properties") or {}).items() if not s.get("writeOnly")}
            cleaned = {p: self._clean(name, f"{where}.{p}", s, True) for p, s in properties.items()}
            # A nullable field is listed as optional: the gateway's output models accept None only there.
            required = [p for p in schema.get("required", []) if cleaned.get(p) and not _nullable(properties[p])]
            return {"type": "object", "properties": {p: s for p, s in cleaned.items() if s}, "required": required}
        if output and kind == "array":
            items = self._clean(name, f"{where}[]", schema.get("items", {}), True)
            return None if items is None else {"type": "array", "items": items}
        if kind not in _SCALARS:
            takes = "objects, arrays or scalars" if output else "strings, integers, numbers or booleans"
            self.problems.append(f"{name}: {where} has type {schema.get('type')!r}; manifest schemas take {takes}")
            return None
        scalar = {"type": kind} | {key: value for key, value in schema.items() if key in _SCALAR_KEYS}
        if "example" in schema and "examples" not in scalar:
            scalar["examples"] = [schema["example"]]
        for key, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            # OpenAPI 3.0 spells an exclusive bound as a flag beside the bound; JSON Schema as the bound itself.
            if isinstance(scalar.get(key), bool) and scalar.pop(key) and bound in scalar:
                scalar[key] = scalar.pop(bound)
        if dropped := sorted(k for k in schema if k not in _SCALAR_KEYS | _ANNOTATIONS and not k.startswith("x-")):
            self.skipped.append(f"{name}: {where}: {dropped} dropped (outside the manifest schema subset)")
        return scalar

    def _inline(self, name: str, node: Any, seen: tuple[str, ...] = ()) -> Any:
        """``node`` with every local ``$ref`` replaced by its target (keys beside a ``$ref`` win)."""
        if isinstance(node, list):
            return [self._inline(name, item, seen) for item in node]
        if not isinstance(node, Mapping):
            return node
        siblings = {key: self._inline(name, value, seen) for key, value in node.items() if key != "$ref"}
        if "$ref" not in node:
            return siblings
        ref = str(node["$ref"])
        if ref in seen or (target := _pointer(self.document, ref)) is None:
            why = "refers to itself; recursive schemas cannot be inlined" if ref in seen else "is not a local reference"
            self.problems.append(f"{name}: {ref} {why}")
            return {}
        return self._inline(name, target, (*seen, ref)) | siblings


def _nullable(schema: Mapping[str, Any]) -> bool:
    kinds = schema.get("type")
    return schema.get("nullable") is True or (isinstance(kinds, list) and "null" in kinds)


def _json_media(content: Mapping[str, Any]) -> str | None:
    return next((m for m in content if m == "application/json" or m.endswith("+json")), None)


def _key_like(name: str) -> bool:
    return bool(_KEY_LIKE.search(re.sub(r"[^a-z0-9]", "", name.lower())))


def _merge_all_of(schema: Any) -> dict[str, Any]:
    if not isinstance(schema, Mapping):
        return {}
    merged = {key: value for key, value in schema.items() if key != "allOf"}
    for part in schema.get("allOf", []):
        for key, value in _merge_all_of(part).items():
            if key == "properties":
                merged[key] = {**merged.get(key, {}), **value}
            elif key == "required":
                merged[key] = [*merged.get(key, []), *value]
            else:
                merged.setdefault(key, value)
    return merged


def _pointer(document: Mapping[str, Any], ref: str) -> Any:
    node: Any = document if ref.startswith("#/") else None
    for part in ref[2:].split("/"):
        node = node.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(node, Mapping) else None
    return node


def _string_paths(schema: Mapping[str, Any], prefix: str) -> set[str]:
    """Paths of string fields in an output schema, spelled as ``untrusted_output_fields`` spells them."""
    found: set[str] = set()
    for prop, spec in (schema.get("properties") or {}).items():
        while spec.get("type") == "array":
            prop, spec = f"{prop}[]", spec.get("items", {})
        found |= {prefix + prop} if spec.get("type") == "string" else _string_paths(spec, f"{prefix}{prop}.")
    return found


def _snake(text: str) -> str:
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text))
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def _location(loc: tuple[int | str, ...]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
