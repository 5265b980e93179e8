"""Draft adapter manifests from an OpenAPI 3 document, for an operator to finish and register.

Operator tooling, not on the request path: nothing here registers, accepts or calls anything. What the
document does not decide is left out of the draft and listed in ``problems``, never guessed.

**Which operations.** A `Selection` keeps the operations with one of its tags, under one of its path
prefixes, or with one of its operation ids (none given: all). `draft_adapters` drafts one adapter, or with
``split`` one per first tag (``github`` + ``issues`` = ``githubissues``), so that a large selection fits
the per-adapter limits. Every secret a draft names is in its adapter's own namespace, as the registry
requires: a split adapter's references, written for the name before the split, are renamed into its own
(``GITHUB_TOKEN`` -> ``GITHUBISSUES_TOKEN``, with a note), and `ImportResult.secrets` lists what to set.
Every limit (`MAX_TOOLS` tools per adapter, `MAX_MANIFEST_BYTES` of manifest,
`MAX_DESCRIPTION_CHARS` per description, `MAX_TOOL_NAME_CHARS` per tool name) that an operation or the
whole draft hits is a `LimitHit`, named with its numbers and the operations that hit it, and a problem:
the draft is refused before anything is sent. A description over the limit is shortened at a paragraph
or sentence (a note says so); a tool name over it is a problem (``x-countersign.name`` renames).

**What each operation becomes.** A GET, POST, PUT, PATCH or DELETE becomes a tool
``<adapter>_<operationId in snake_case>`` (a leading ``<tag>/`` of the operation id is dropped when the
adapter is split by that tag), ``read`` for GET. Its ``input_schema`` is one closed object of its path,
query and header parameters and its JSON body's properties (local ``$ref`` and ``allOf`` resolved; arrays
and nested objects kept; a body that is ``oneOf`` takes its first object form; descriptions, defaults,
formats and enums kept). An argument that does not travel where the method puts it (a query parameter of
a POST, a header, the body of a DELETE, a body property renamed ``body_<name>`` because a parameter has
its name) is declared in ``send_as``. Its ``output_schema`` is its first 2xx JSON response (an array or a
scalar is wrapped by the gateway, see `gateway.registry.schema`), trimmed to `OUTPUT_SCHEMA_BUDGET` bytes
(descriptions and examples first, then the deepest levels, each noted); a 204 or a response without a
body is ``{"type": "object", "properties": {}}``. Output fields the schema cannot express (``oneOf``,
``anyOf``, no type) are left out of what the model is shown, and listed in ``skipped``. Free-text string
fields of the output (no enum, format or pattern) are third-party text: they are declared in
``untrusted_output_fields`` unless the overlay lists them in ``trusted_output_fields``, and a note says
which it marked. Idempotency keys (the header, or inputs named like one) are dropped: the gateway mints
them.

**x-countersign.** On an operation, with the root's as defaults (``approval`` and ``write_contract`` merged
key by key, as they are between the document and the overlay, but an operation's own lookup replaces the
root's whole; a root ``summary_template`` is every write's unless its own): ``access``, ``approval``,
``write_contract``, ``summary_template``, ``agent_text_fields``, ``untrusted_output_fields``,
``trusted_output_fields``, ``timeout_seconds``, ``output_check``, ``name``, and for writes ``preview_path``
and ``preview_fields`` (the target read at proposal, which a state lookup compares with). The root may add
``credential``, ``signing_secret_env`` (only for a backend that still verifies identities with a shared key;
absent, the gateway's JWKS), ``health_path`` and ``output_schema_budget``. The same keys may come from an
overlay (`draft_adapters`' ``overlay``: the root keys, and ``operations`` by operation id), so a service owner
never has to patch the API's own document. With no problems, each draft is checked with
``AdapterManifest.model_validate`` and its errors become problems.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gateway.canonical import canonical_json
from gateway.registry.manifest import (
    MAX_DESCRIPTION_CHARS,
    MAX_MANIFEST_BYTES,
    MAX_TOOL_NAME_CHARS,
    MAX_TOOLS,
    NAME_PATTERN,
    SECRET_PARTS,
    AdapterManifest,
    secret_namespace,
)
from gateway.registry.schema import wrapped_field

__all__ = [
    "OUTPUT_SCHEMA_BUDGET",
    "ImportResult",
    "LimitHit",
    "OperationDraft",
    "Selection",
    "draft_adapters",
    "draft_manifest",
    "manifest_bytes",
]

_METHODS = ("get", "post", "put", "patch", "delete")
_OP_KEYS = {"access", "approval", "write_contract", "summary_template", "agent_text_fields", "untrusted_output_fields"}
_OP_KEYS |= {"timeout_seconds", "trusted_output_fields", "output_check", "name", "preview_path", "preview_fields"}
_DEFAULT_KEYS = ("access", "approval", "write_contract", "timeout_seconds", "output_check", "summary_template")
_WRITE_KEYS = ("approval", "write_contract", "preview_path", "preview_fields")
_ROOT_ONLY_KEYS = ("credential", "signing_secret_env", "health_path")
_IMPORT_KEYS = ("output_schema_budget",)
_CONTRACT_KEYS = ("dedupes_on_key", "key_retention_seconds")
_LOOKUPS = ("status_path", "search_path", "state_path", "settle_by_person")
_LOOKUP_PARTS = {*_LOOKUPS, "search_query", "match_field", "state_match"}
_SCALARS = {"string", "integer", "number", "boolean"}
_SCALAR_KEYS = {"title", "description", "examples", "default", "format", "enum", "minLength", "maxLength", "pattern"}
_SCALAR_KEYS |= {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
_ARRAY_KEYS = {"title", "description", "default", "minItems", "maxItems"}
_ANNOTATIONS = {"type", "nullable", "readOnly", "writeOnly", "deprecated", "xml", "externalDocs", "example"}
_OUTPUT_NOISE = ("description", "title", "examples", "default")
_KEY_LIKE = re.compile(r"idempot|^(?:dedupe?|deduplication)(?:key|token|id)$|^client(?:request)?token$")
_GATEWAY_HEADERS = {"authorization", "cookie", "host", "content-length", "content-type", "accept", "traceparent"}
_SUCCESS = ("200", "201", "202", "203", "204")

OUTPUT_SCHEMA_BUDGET = 4096
"""Bytes of compact JSON a read tool's imported output schema may take (root ``output_schema_budget``
changes it). Every listed tool's schema goes to the model with ``tools/list``; GitHub's issue object in
full is over 30 KB, most of it nested descriptions of fields an agent never needs."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Selection:
    """Which operations to import: those with any of `tags`, under any of `path_prefixes`, or with any of
    `operation_ids`. Empty, every operation."""

    tags: frozenset[str] = frozenset()
    path_prefixes: tuple[str, ...] = ()
    operation_ids: frozenset[str] = frozenset()

    def takes(self, path: str, operation: Mapping[str, Any]) -> bool:
        if not (self.tags or self.path_prefixes or self.operation_ids):
            return True
        return (
            bool(self.tags & set(operation.get("tags") or ()))
            or any(path.startswith(prefix) for prefix in self.path_prefixes)
            or str(operation.get("operationId", "")) in self.operation_ids
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class LimitHit:
    """A limit of the registry that the draft or some of its operations exceed."""

    limit: str
    """``tools per adapter``, ``manifest bytes``, ``description length`` or ``tool name length``."""
    allowed: int
    actual: int
    """The largest value found (the draft's own, or its worst operation's)."""
    operations: tuple[str, ...]
    """``METHOD /path`` of each operation that hits it (for tools per adapter and manifest bytes, the
    largest contributors first)."""
    blocking: bool = True
    """False when the importer resolved it itself (a description shortened, with a note)."""

    def __str__(self) -> str:
        shown = ", ".join(self.operations[:8]) + (
            f" and {len(self.operations) - 8} more" if len(self.operations) > 8 else ""
        )
        return f"{self.limit}: {self.actual} > {self.allowed} ({len(self.operations)} operation(s): {shown})"


@dataclass(frozen=True, kw_only=True, slots=True)
class OperationDraft:
    """What one operation became (for ``--dry-run``)."""

    operation: str
    """``METHOD /path``."""
    operation_id: str
    tool: str
    mode: str
    inputs: tuple[str, ...]
    """Input names, ``*`` after a required one, with where each travels when not the default."""
    output_fields: tuple[str, ...]
    """The top-level fields the model is shown (``items[]`` for a wrapped array)."""
    untrusted: tuple[str, ...]
    output_bytes: int
    """Compact JSON size of the output schema, after trimming."""

    def line(self) -> str:
        out = ", ".join(self.output_fields[:12]) + (" ..." if len(self.output_fields) > 12 else "")
        return (
            f"{self.operation} -> {self.tool} ({self.mode}); inputs: {', '.join(self.inputs) or '-'};"
            f" output: {out or '-'} ({self.output_bytes} B); untrusted: {len(self.untrusted)}"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ImportResult:
    """A draft manifest and what an operator must settle before registering it."""

    name: str
    """The adapter's name."""
    manifest: dict[str, Any]
    """JSON-ready, in the shape of `AdapterManifest`; complete only when `problems` is empty."""
    problems: tuple[str, ...]
    """What the document left undecided or a manifest cannot express; each starts with the tool or place."""
    skipped: tuple[str, ...]
    """What the document has and the draft deliberately leaves out (Idempotency-Key headers, HEAD, ...)."""
    notes: tuple[str, ...]
    """Decisions the importer made that an operator may want to change (generated tool names, ...)."""
    limits: tuple[LimitHit, ...] = ()
    """Every limit hit, blocking or resolved; each blocking one is also among `problems`."""
    operations: tuple[OperationDraft, ...] = ()
    secrets: tuple[tuple[str, str], ...] = ()
    """``(where, variable)`` of each secret the draft names: what the operator sets on the gateway host."""


def manifest_bytes(manifest: Mapping[str, Any]) -> int:
    """The size of `manifest` as the registry reads it: compact JSON, UTF-8."""
    return len(json.dumps(manifest, separators=(",", ":"), ensure_ascii=False).encode())


def draft_manifest(
    document: Mapping[str, Any],
    *,
    name: str,
    base_url: str | None = None,
    select: Selection | None = None,
    overlay: Mapping[str, Any] | None = None,
) -> ImportResult:
    """Draft the manifest of adapter ``name`` from OpenAPI 3 ``document``, reporting problems rather than raising.

    ``base_url`` overrides the document's first ``servers[].url``.
    """
    return _Importer(document, overlay or {}).draft(name, base_url, _selected(document, select or Selection()), "")


def draft_adapters(
    document: Mapping[str, Any],
    *,
    name: str,
    base_url: str | None = None,
    select: Selection | None = None,
    overlay: Mapping[str, Any] | None = None,
    split: bool = False,
) -> tuple[ImportResult, ...]:
    """The drafts of the selected operations: one adapter ``name``, or with `split` one per first tag."""
    chosen = _selected(document, select or Selection())
    importer = _Importer(document, overlay or {})
    if not split:
        return (importer.draft(name, base_url, chosen, ""),)
    groups: dict[str, list[tuple[str, str, Mapping[str, Any]]]] = {}
    for entry in chosen:
        tags = entry[2].get("tags") or [""]
        groups.setdefault(str(tags[0]), []).append(entry)
    results = []
    for tag, entries in groups.items():
        suffix = re.sub(r"[^a-z0-9]", "", tag.lower())
        importer = _Importer(document, overlay or {})
        results.append(importer.draft(f"{name}{suffix}"[:31], base_url, entries, tag, secrets_of=name))
    return tuple(results)


def _selected(document: Mapping[str, Any], select: Selection) -> list[tuple[str, str, Mapping[str, Any]]]:
    chosen = []
    for path, item in (document.get("paths") or {}).items():
        for method, operation in (item or {}).items():
            if method in (*_METHODS, "head", "options", "trace") and select.takes(path, operation or {}):
                chosen.append((path, method, operation or {}))
    return chosen


class _Importer:
    def __init__(self, document: Mapping[str, Any], overlay: Mapping[str, Any]) -> None:
        self.document, self.overlay = document, overlay
        self.problems: list[str] = []
        self.skipped: list[str] = []
        self.notes: list[str] = []
        self.limits: list[LimitHit] = []
        self.operations: list[OperationDraft] = []
        self.budget = OUTPUT_SCHEMA_BUDGET

    def draft(
        self,
        name: str,
        base_url: str | None,
        chosen: Sequence[tuple[str, str, Mapping[str, Any]]],
        tag: str,
        *,
        secrets_of: str | None = None,
    ) -> ImportResult:
        """`secrets_of`: the adapter the document's and overlay's secret references were written for (the name
        before a split; `_own_secrets`)."""
        self.name = name
        if not str(self.document.get("openapi", "")).startswith("3."):
            self.problems.append(f"not an OpenAPI 3 document (openapi: {str(self.document.get('openapi', ''))!r})")
        if not NAME_PATTERN.fullmatch(name):
            self.problems.append(f"adapter name {name!r} must match {NAME_PATTERN.pattern}")
        allowed = {*_DEFAULT_KEYS, *_ROOT_ONLY_KEYS, *_IMPORT_KEYS}
        root = _layered(
            self._extension("x-countersign (root)", self.document, allowed),
            self._extension("overlay", {"x-countersign": self._overlay_root()}, allowed),
        )
        self.budget = int(root.get("output_schema_budget", OUTPUT_SCHEMA_BUDGET))
        manifest: dict[str, Any] = {"base_url": self._base_url(base_url)}
        manifest |= {key: root[key] for key in _ROOT_ONLY_KEYS if key in root}
        secrets = self._own_secrets(manifest, secrets_of or name)
        defaults = {key: root[key] for key in _DEFAULT_KEYS if key in root}
        tools: dict[str, dict[str, Any]] = {}
        long_names: list[str] = []
        long_texts: list[tuple[str, int]] = []
        for path, method, operation in chosen:
            where = f"{method.upper()} {path}"
            if method in ("head", "options", "trace"):
                self.skipped.append(f"{where}: a manifest tool cannot call {method.upper()}")
                continue
            shared = (self.document.get("paths") or {}).get(path, {}).get("parameters", [])
            tool = self._tool(where, method.upper(), path, operation, shared, defaults, tag)
            if len(tool["name"]) > MAX_TOOL_NAME_CHARS:
                long_names.append(where)
            if (chars := tool.pop("_description_chars", 0)) > MAX_DESCRIPTION_CHARS:
                long_texts.append((where, chars))
            if tool["name"] in tools:
                self.problems.append(f"{where}: tool name {tool['name']!r} is taken; operation left out")
                continue
            tools[tool["name"]] = tool
        if not tools:
            self.problems.append("no operation became a tool")
        manifest["tools"] = list(tools.values())
        self._limits(manifest, tools, chosen, long_names, long_texts)
        if not self.problems:
            try:
                AdapterManifest.model_validate(manifest)
            except ValidationError as error:
                self.problems += [f"{_location(e['loc'])}: {e['msg']}" for e in error.errors()]
        return ImportResult(
            name=name,
            manifest=manifest,
            problems=tuple(self.problems),
            skipped=tuple(self.skipped),
            notes=tuple(self.notes),
            limits=tuple(self.limits),
            operations=tuple(self.operations),
            secrets=tuple(secrets),
        )

    def _own_secrets(self, manifest: dict[str, Any], written_for: str) -> list[tuple[str, str]]:
        """Every secret the draft names, in this adapter's own namespace (`secret_namespace`), which the registry
        holds every adapter to. A split adapter's references, written for the adapter before the split
        (``GITHUB_TOKEN``), are renamed into its own (``GITHUBISSUES_TOKEN``), with a note: one secret per
        adapter, which the operator sets (the same token, or one scoped to that adapter's operations), rather than
        a namespace rule that would let one registration name another adapter's secrets. A reference outside
        the namespace is a problem."""
        mine, theirs = secret_namespace(self.name), secret_namespace(written_for)
        places: list[tuple[dict[str, Any], str, str]] = [(manifest, "signing_secret_env", "signing_secret_env")]
        if isinstance(manifest.get("credential"), Mapping):
            credential = manifest["credential"] = dict(manifest["credential"])  # the overlay's own stays as written
            places += [(credential, part, f"credential.{part}") for part in SECRET_PARTS]
        found = []
        for holder, key, where in places:
            variable = holder.get(key)
            if not isinstance(variable, str):
                continue
            if mine != theirs and variable.startswith(theirs):
                renamed = mine + variable[len(theirs) :]
                self.notes.append(
                    f"{where}: {variable} becomes {renamed}, in adapter {self.name}'s own namespace: set it on the"
                    " gateway host (the same value, or a credential scoped to this adapter's operations)"
                )
                holder[key] = variable = renamed
            if not variable.startswith(mine):
                self.problems.append(f"{where}: {variable} is not in adapter {self.name}'s namespace ({mine}...)")
            found.append((where, variable))
        return found

    def _limits(
        self,
        manifest: Mapping[str, Any],
        tools: Mapping[str, Mapping[str, Any]],
        chosen: Sequence[tuple[str, str, Mapping[str, Any]]],
        long_names: list[str],
        long_texts: list[tuple[str, int]],
    ) -> None:
        where = {tool["name"]: f"{tool['method']} {tool['path']}" for tool in tools.values()}
        hits: list[LimitHit] = []
        if len(tools) > MAX_TOOLS:
            by_tag: dict[str, int] = {}
            for _, _, operation in chosen:
                tag = str((operation.get("tags") or ["(no tag)"])[0])
                by_tag[tag] = by_tag.get(tag, 0) + 1
            self.notes.append(
                "tools by first tag (split with --split, or select fewer): "
                + ", ".join(f"{tag} {count}" for tag, count in sorted(by_tag.items(), key=lambda kv: -kv[1]))
            )
            every = tuple(where[name] for name in tools)
            hits.append(LimitHit(limit="tools per adapter", allowed=MAX_TOOLS, actual=len(tools), operations=every))
        size = manifest_bytes(manifest)
        if size > MAX_MANIFEST_BYTES:
            largest = sorted(tools.values(), key=lambda tool: -manifest_bytes(tool))
            operations = tuple(f"{where[tool['name']]} ({manifest_bytes(tool)} B)" for tool in largest)
            hits.append(
                LimitHit(limit="manifest bytes", allowed=MAX_MANIFEST_BYTES, actual=size, operations=operations)
            )
        if long_names:
            longest = max(len(name) for name in tools) if tools else 0
            hits.append(
                LimitHit(
                    limit="tool name length",
                    allowed=MAX_TOOL_NAME_CHARS,
                    actual=longest,
                    operations=tuple(f"{op} (rename with x-countersign.name)" for op in long_names),
                )
            )
        if long_texts:
            hits.append(
                LimitHit(
                    limit="description length",
                    allowed=MAX_DESCRIPTION_CHARS,
                    actual=max(chars for _, chars in long_texts),
                    operations=tuple(op for op, _ in long_texts),
                    blocking=False,
                )
            )
        self.limits += hits
        self.problems += [f"limit {hit}" for hit in hits if hit.blocking]

    def _overlay_root(self) -> dict[str, Any]:
        return {key: value for key, value in self.overlay.items() if key != "operations"}

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
        self,
        where: str,
        method: str,
        path: str,
        op: Mapping[str, Any],
        shared: Any,
        defaults: dict[str, Any],
        tag: str,
    ) -> dict[str, Any]:
        operation_id = str(op.get("operationId") or "")
        overlay_op = (self.overlay.get("operations") or {}).get(operation_id, {})
        own = _layered(
            self._extension(where, op, _OP_KEYS), self._extension(where, {"x-countersign": overlay_op}, _OP_KEYS)
        )
        name = f"{self.name}_{_snake(str(own.get('name') or _tool_part(operation_id, tag) or f'{method} {path}'))}"
        if not operation_id:
            self.notes.append(f"{where}: no operationId; named {name}")
        op = self._inline(name, op)
        ext = _layered(defaults, own)
        texts = [str(op[key]).strip() for key in ("summary", "description") if str(op.get(key) or "").strip()]
        if not texts:
            self.problems.append(f"{name}: no summary or description to tell the model what it does")
        description = "\n\n".join(dict.fromkeys(texts))
        send_as: dict[str, Any] = {}
        tool: dict[str, Any] = {
            "name": name,
            "description": _shorten(description, MAX_DESCRIPTION_CHARS),
            "_description_chars": len(description),
            "mode": "read" if method == "GET" else "write",
            "method": method,
            "path": path,
            "input_schema": self._input(name, method, path, op, self._inline(name, shared), send_as),
            "output_schema": self._output(name, op.get("responses") or {}),
        }
        if len(description) > MAX_DESCRIPTION_CHARS:
            self.notes.append(f"{name}: description shortened from {len(description)} to {len(tool['description'])}")
        if send_as:
            tool["send_as"] = send_as
        if "access" in ext:
            tool["access"] = ext["access"]
        else:
            self.problems.append(f"{name}: no access rule (x-countersign.access)")
        if method != "GET":
            self._write_parts(name, tool, ext)
        elif misplaced := [key for key in (*_WRITE_KEYS, "summary_template") if key in own]:
            self.problems.append(f"{name}: {misplaced} are for write tools; left out")
        tool |= {key: ext[key] for key in ("agent_text_fields", "timeout_seconds", "output_check") if key in ext}
        self._untrusted(name, tool, ext)
        for text_field in tool.get("agent_text_fields", ()):
            if text_field not in tool["input_schema"]["properties"]:
                self.problems.append(f"{name}: agent_text_fields names {text_field!r}, which is not an input")
        self.operations.append(self._summary(where, operation_id, tool))
        return tool

    def _untrusted(self, name: str, tool: dict[str, Any], ext: Mapping[str, Any]) -> None:
        """Declared untrusted fields, plus every free-text string of the output unless declared trusted."""
        output = tool["output_schema"]
        field_name = wrapped_field(output)
        prefix = f"{field_name}" if field_name else ""
        strings = _string_paths(output, prefix)
        declared = list(ext.get("untrusted_output_fields", ()))
        for path in set(declared) - strings:
            self.problems.append(f"{name}: untrusted_output_fields names {path!r}, not a string output")
        # A string is shown to the model only when its shape is declared (`gateway.untrusted`): trusting a
        # field means giving it the pattern its values must match, which output validation then enforces.
        shapes = ext.get("trusted_output_fields", {})
        if not isinstance(shapes, Mapping):
            self.problems.append(f"{name}: trusted_output_fields maps each field to the pattern its values match")
            shapes = {}
        trusted = set(shapes)
        for path in trusted - strings:
            self.problems.append(f"{name}: trusted_output_fields names {path!r}, not a string output")
        for path, pattern in shapes.items():
            if path in strings and not _shaped(output, path.removeprefix(prefix), pattern):
                self.problems.append(f"{name}: trusted_output_fields gives {path!r} {pattern!r}, not a regex")
        free = sorted(_free_text_paths(output, prefix) - trusted - set(declared))
        if tool["mode"] == "read" and free:
            # A write's answer reaches approvers and the card, never the model: nothing to withhold there.
            self.notes.append(f"{name}: {len(free)} free-text output field(s) marked untrusted: {', '.join(free)}")
            declared += free
        elif tool["mode"] == "write":
            declared = [path for path in declared if path in strings]
        if declared:
            tool["untrusted_output_fields"] = declared

    def _summary(self, where: str, operation_id: str, tool: Mapping[str, Any]) -> OperationDraft:
        schema = tool["input_schema"]
        places = tool.get("send_as", {})
        inputs = tuple(
            f"{arg}{'*' if arg in schema['required'] else ''}"
            + (f" ({places[arg]['in']} {places[arg]['name']})" if arg in places else "")
            for arg in schema["properties"]
        )
        output = tool["output_schema"]
        wrapped = wrapped_field(output)
        fields = (f"{wrapped}[]",) if wrapped else tuple(output.get("properties") or ())
        return OperationDraft(
            operation=where,
            operation_id=operation_id,
            tool=tool["name"],
            mode=tool["mode"],
            inputs=inputs,
            output_fields=fields,
            untrusted=tuple(tool.get("untrusted_output_fields", ())),
            output_bytes=manifest_bytes(output),
        )

    def _write_parts(self, name: str, tool: dict[str, Any], ext: Mapping[str, Any]) -> None:
        for key in ("approval", "summary_template"):
            if key in ext:
                tool[key] = ext[key]
            else:
                self.problems.append(f"{name}: a write without {key} (x-countersign.{key})")
        tool |= {key: ext[key] for key in ("preview_path", "preview_fields") if key in ext}
        contract = ext.get("write_contract")
        if not isinstance(contract, Mapping) or not any(lookup in contract for lookup in _LOOKUPS):
            self.problems.append(
                f"{name}: a write without a lookup (x-countersign.write_contract.status_path, search_path,"
                " state_path or settle_by_person); write_contract left out"
            )
        elif missing := [key for key in _CONTRACT_KEYS if key not in contract]:
            self.problems.append(f"{name}: write_contract lacks {missing}; left out")
        else:
            tool["write_contract"] = dict(contract)

    def _input(
        self, name: str, method: str, path: str, op: Mapping[str, Any], shared: Any, send_as: dict[str, Any]
    ) -> dict[str, Any]:
        properties: dict[str, Any] = {}
        required: list[str] = []
        in_query = method in ("GET", "DELETE")
        # Path-level parameters first, so an operation's own parameter of the same name and place wins.
        parameters = {(p.get("in"), p.get("name")): p for p in [*shared, *op.get("parameters", [])]}
        placeholders = set(re.findall(r"{([^}]*)}", path))
        # Path parameters first: they keep their names; a query or header parameter of the same name is renamed.
        for (place, pname), parameter in sorted(parameters.items(), key=lambda kv: kv[0][0] != "path"):
            must = place == "path" or parameter.get("required") is True
            wire = str(pname)
            if place == "header" and wire.lower() == "idempotency-key":
                self.skipped.append(f"{name}: header Idempotency-Key dropped (the gateway mints and sends the key)")
            elif place not in ("path", "query", "header") or (
                place == "header" and (wire.lower() in _GATEWAY_HEADERS or wire.lower().startswith("x-countersign"))
            ):
                note = f"{name}: {place} parameter {pname!r} is not sent by manifest tools"
                (self.problems if must else self.skipped).append(note)
            elif _key_like(wire):
                self._drop_key(name, f"{place} parameter {pname!r}", must)
            elif (schema := self._clean(name, f"input.{pname}", parameter.get("schema", {}), False)) is not None:
                if "description" in parameter:
                    schema.setdefault("description", parameter["description"])
                arg = _snake(wire) if place == "header" else wire
                if arg in properties:
                    arg = f"{place}_{_snake(wire)}"
                properties[arg] = schema
                required += [arg] if must else []
                default = "path" if arg in placeholders else ("query" if in_query else "body")
                if place != default or arg != wire:
                    send_as[arg] = {"in": place, "name": wire}
        for placeholder in placeholders:
            if placeholder not in properties:
                self.problems.append(f"{name}: path placeholder {{{placeholder}}} has no path parameter")
        body, body_required = self._body(name, op.get("requestBody"))
        for prop, spec in body.items():
            if _key_like(prop):
                self._drop_key(name, f"body property {prop!r}", prop in body_required)
            elif spec.get("readOnly"):
                self.skipped.append(f"{name}: body property {prop!r} is readOnly")
            elif (schema := self._clean(name, f"input.{prop}", spec, False)) is not None:
                arg = prop if prop not in properties else f"body_{prop}"
                if arg in properties:
                    self.problems.append(f"{name}: body property {prop!r} clashes with two parameters")
                    continue
                properties[arg] = schema
                required += [arg] if prop in body_required else []
                if in_query or arg != prop or arg in placeholders:
                    send_as[arg] = {"in": "body", "name": prop}
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
        if schema is not None and ("oneOf" in schema or "anyOf" in schema):
            forms = [_merge_all_of(form) for form in schema.get("oneOf", schema.get("anyOf", []))]
            objects = [form for form in forms if form.get("type", "object") == "object" and "properties" in form]
            schema = objects[0] if objects else None
            if schema is not None:
                self.notes.append(
                    f"{name}: the request body is one of {len(forms)} forms; the first object form is used"
                )
        if schema is None or schema.get("type", "object") != "object":
            self.problems.append(f"{name}: the request body is not a JSON object; it cannot become arguments")
            return {}, []
        required = list(schema.get("required", [])) if body.get("required") is True else []
        return dict(schema.get("properties") or {}), required

    def _output(self, name: str, responses: Mapping[Any, Any]) -> dict[str, Any]:
        for status in _SUCCESS:
            if status not in responses and int(status) not in responses:
                continue
            content = responses.get(status, responses.get(int(status), {})).get("content") or {}
            media = _json_media(content)
            if media is None or "schema" not in content[media]:
                if content:
                    self.problems.append(f"{name}: the {status} response is not JSON ({', '.join(content)})")
                return {"type": "object", "properties": {}}
            schema = self._clean(name, "output", content[media]["schema"], True)
            if schema is None:
                self.problems.append(f"{name}: the {status} response's schema cannot be expressed")
                return {"type": "object", "properties": {}}
            return self._trim(name, schema)
        self.problems.append(f'{name}: no 2xx response; output_schema is {{"type": "object", "properties": {{}}}}')
        return {"type": "object", "properties": {}}

    def _trim(self, name: str, schema: dict[str, Any]) -> dict[str, Any]:
        """`schema` within the output budget: annotations below the top level first, then depth."""
        before = manifest_bytes(schema)
        if before <= self.budget:
            return schema
        trimmed: dict[str, Any] = _without_noise(schema, 2)
        dropped = "descriptions and examples below the top level"
        if manifest_bytes(trimmed) > self.budget:
            trimmed, dropped = _without_noise(schema, 0), "descriptions and examples"
        depth = 3
        while manifest_bytes(trimmed) > self.budget and depth >= 0:
            trimmed, dropped = (
                _to_depth(trimmed, depth),
                f"descriptions, examples and objects nested deeper than {depth}",
            )
            depth -= 1
        if manifest_bytes(trimmed) > self.budget:
            self.problems.append(
                f"{name}: the output schema is {manifest_bytes(trimmed)} bytes at its top level alone, over the"
                f" budget of {self.budget} (x-countersign.output_schema_budget)"
            )
        self.notes.append(f"{name}: output schema trimmed from {before} to {manifest_bytes(trimmed)} bytes ({dropped})")
        return trimmed

    def _clean(self, name: str, where: str, schema: Any, output: bool) -> dict[str, Any] | None:
        """``schema`` in the manifest subset, or None when it cannot be expressed (a problem for an input; for
        an output field, left out of what the model is shown and listed in ``skipped``)."""
        schema = _merge_all_of(schema)
        if output and "not" not in schema and (shared := _shared_object(schema)) is not None:
            # An answer that is one of several objects (GitHub's issue events): what every form has alike is
            # shown, the rest is withheld like any undescribed field.
            count = len(schema.get("oneOf") or schema.get("anyOf") or [])
            self.notes.append(f"{name}: {where} is one of {count} object forms; the fields they share are shown")
            return self._clean(name, where, shared, output)
        if any(key in schema for key in ("oneOf", "anyOf", "not")):
            forms = [] if output or "not" in schema else list(schema.get("oneOf") or schema.get("anyOf") or [])
            for form in forms:
                # An input may take any of the forms; the first that a manifest schema can express is offered.
                quiet = _Importer(self.document, self.overlay)
                if (chosen := quiet._clean(name, where, form, output)) is not None and not quiet.problems:
                    self.notes.append(f"{name}: {where} takes one of {len(forms)} forms; the first expressible is used")
                    return {**chosen, **_described(schema)}
            self._unexpressed(name, where, "uses oneOf/anyOf/not, which a manifest schema cannot express", output)
            return None
        kinds = schema.get("type", "object" if "properties" in schema else None)
        kinds = [k for k in (kinds if isinstance(kinds, list) else [kinds]) if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
        if kind == "object":
            properties = {
                p: s
                for p, s in (schema.get("properties") or {}).items()
                if not s.get("writeOnly" if output else "readOnly")
            }
            cleaned = {p: self._clean(name, f"{where}.{p}", s, output) for p, s in properties.items()}
            kept = {p: s for p, s in cleaned.items() if s is not None}
            if output:
                # A nullable field is listed as optional: the gateway's output models accept None only there.
                required = [p for p in schema.get("required", []) if p in kept and not _nullable(properties[p])]
                return {"type": "object", "properties": kept, "required": required} | _described(schema)
            required = [p for p in schema.get("required", []) if p in kept]
            closed = {"type": "object", "properties": kept, "required": required, "additionalProperties": False}
            return closed | _described(schema)
        if kind == "array":
            items = self._clean(name, f"{where}[]", schema.get("items", {}), output)
            if items is None:
                return None
            return {"type": "array", "items": items} | {k: v for k, v in schema.items() if k in _ARRAY_KEYS}
        if kind not in _SCALARS:
            takes = "objects, arrays or scalars"
            self._unexpressed(name, where, f"has type {schema.get('type')!r}; manifest schemas take {takes}", output)
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

    def _unexpressed(self, name: str, where: str, why: str, output: bool) -> None:
        if output:
            self.skipped.append(f"{name}: {where} {why}; not shown to the model")
        else:
            self.problems.append(f"{name}: {where} {why}")

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


def _layered(under: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over`'s x-countersign keys on top of `under`'s: ``approval`` and ``write_contract`` merged key by key (an
    overlay's ``{"applied_statuses": [409]}`` keeps the document's ``dedupes_on_key``), except that a lookup in
    `over`'s contract replaces `under`'s lookup whole; every other key replaced."""
    layered = dict(under) | dict(over)
    for key in ("approval", "write_contract"):
        if isinstance(under.get(key), Mapping) and isinstance(over.get(key), Mapping):
            base = dict(under[key])
            if key == "write_contract" and any(lookup in over[key] for lookup in _LOOKUPS):
                # A lookup named on top replaces the one beneath (a person, say), parts and all.
                base = {part: value for part, value in base.items() if part not in _LOOKUP_PARTS}
            layered[key] = base | dict(over[key])
    return layered


def _described(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {key: schema[key] for key in ("description",) if isinstance(schema.get(key), str)}


def _shorten(text: str, limit: int) -> str:
    """`text` within `limit` characters, cut after a paragraph or a sentence where one ends late enough."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    for mark in ("\n\n", ". ", "\n"):
        cut = head.rfind(mark)
        if cut >= limit // 2:
            return head[: cut + (1 if mark == ". " else 0)].rstrip()
    return head.rstrip() + "…"


def _without_noise(schema: Any, keep_to: int, depth: int = 0) -> Any:
    """`schema` without descriptions, titles, examples and defaults below `keep_to` levels of properties."""
    if isinstance(schema, list):
        return [_without_noise(item, keep_to, depth) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    kept: dict[str, Any] = {}
    for key, value in schema.items():
        if depth >= keep_to and key in _OUTPUT_NOISE:
            continue
        if key == "properties" and isinstance(value, Mapping):
            # Property names are the API's (a field may be called ``title``): only their schemas are trimmed.
            kept[key] = {name: _without_noise(spec, keep_to, depth + 1) for name, spec in value.items()}
        else:
            kept[key] = value if key in ("enum", "required") else _without_noise(value, keep_to, depth)
    return kept


def _to_depth(schema: dict[str, Any], depth: int) -> dict[str, Any]:
    """`schema` with objects nested deeper than `depth` levels left out (not shown to the model)."""

    def cut(node: dict[str, Any], level: int) -> dict[str, Any] | None:
        if node.get("type") == "array":
            items = cut(node.get("items", {}), level)
            return None if items is None else node | {"items": items}
        if node.get("type") != "object":
            return node
        if level > depth:
            return None
        properties = {p: c for p, s in (node.get("properties") or {}).items() if (c := cut(s, level + 1)) is not None}
        required = [p for p in node.get("required", []) if p in properties]
        return node | {"properties": properties, "required": required}

    return cut(schema, 0) or {"type": "object", "properties": {}}


def _tool_part(operation_id: str, tag: str) -> str:
    """The operation id, without a leading ``<tag>/`` when the adapter is named after that tag already."""
    if tag and operation_id.lower().startswith(f"{tag.lower()}/"):
        return operation_id[len(tag) + 1 :]
    return operation_id


def _nullable(schema: Mapping[str, Any]) -> bool:
    kinds = schema.get("type")
    return schema.get("nullable") is True or (isinstance(kinds, list) and "null" in kinds)


def _json_media(content: Mapping[str, Any]) -> str | None:
    return next((m for m in content if m.split(";")[0] == "application/json" or m.endswith("+json")), None)


def _key_like(name: str) -> bool:
    return bool(_KEY_LIKE.search(re.sub(r"[^a-z0-9]", "", name.lower())))


def _shared_object(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """For ``oneOf``/``anyOf`` of objects only: an object of the properties every form declares alike (the same
    schema), required where every form requires them; None otherwise (a form that is no object, none shared)."""
    forms = [_merge_all_of(form) for form in schema.get("oneOf") or schema.get("anyOf") or []]
    if len(forms) < 2 or not all(form.get("type", "object") == "object" and "properties" in form for form in forms):
        return None
    first, *others = forms
    shared = {
        name: part
        for name, part in first["properties"].items()
        if all(canonical_json(other["properties"].get(name)) == canonical_json(part) for other in others)
    }
    if not shared:
        return None
    required = [name for name in shared if all(name in form.get("required", ()) for form in forms)]
    return {"type": "object", "properties": shared, "required": required} | _described(schema)


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


def _walk_strings(schema: Mapping[str, Any], path: str, free: bool) -> Iterable[str]:
    kind = schema.get("type")
    if kind == "array":
        yield from _walk_strings(schema.get("items", {}), f"{path}[]", free)
    elif kind == "object" or "properties" in schema:
        for prop, spec in (schema.get("properties") or {}).items():
            yield from _walk_strings(spec, f"{path}.{prop}" if path else prop, free)
    elif kind == "string" and path and not (free and any(key in schema for key in ("enum", "format", "pattern"))):
        yield path


def _shaped(schema: dict[str, Any], path: str, pattern: Any) -> bool:
    """Give the string field at `path` (spelled as `_walk_strings` spells it, less the wrapper's prefix) the
    `pattern` its values must match; False, changing nothing, when `pattern` is not a regex."""
    if not isinstance(pattern, str):
        return False
    try:
        re.compile(pattern)
    except re.error:
        return False
    node = schema
    for step in re.findall(r"\[\]|[^.\[\]]+", path):
        node = node["items"] if step == "[]" else node["properties"][step]
    node["pattern"] = pattern
    return True


def _string_paths(schema: Mapping[str, Any], prefix: str) -> set[str]:
    """Paths of string fields in an output schema, spelled as ``untrusted_output_fields`` spells them."""
    return set(_walk_strings(schema, prefix, False))


def _free_text_paths(schema: Mapping[str, Any], prefix: str) -> set[str]:
    """The string fields with no enum, format or pattern: text anyone may have written."""
    return set(_walk_strings(schema, prefix, True))


def _snake(text: str) -> str:
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text))
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def _location(loc: tuple[int | str, ...]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
