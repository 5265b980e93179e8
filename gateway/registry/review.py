"""What a person reviewing an adapter reads of each tool: a service owner checking what an import made of
their API, and a registry admin deciding whether to serve it.

Per tool: its method and path, who may call it, its inputs (type, required, where each travels), its output
fields with what the model is shown of each (`gateway.untrusted.model_visibility`: trusted by shape, shown
fenced as untrusted, or withheld), the inputs an agent writes freely, and for a write its approval and write
contract in words (where the key travels, how a lost answer is looked up, whether it is ever resent, which
answers mean "not applied" or "applied"). `review_lines` renders one tool as text, so an update is read as a
diff of exactly this (`gateway.registry.views.AdapterDiff.reviewed`).

Who calls it: `gateway.registry.views`, for the registry API, the admin API, the console and the CLI. It reads
a manifest and decides nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from gateway.errors import SchemaError
from gateway.registry.manifest import PLACEHOLDER, AdapterManifest, StateCondition, ToolSpec, WriteContractSpec
from gateway.registry.schema import output_model, wrapped_field
from gateway.untrusted import model_visibility

__all__ = ["review_lines", "tool_reviews"]

SHOWN = "shown"
"""What the model is shown of a number, a boolean or a null: the value (only strings carry someone's text)."""


def tool_reviews(manifest: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each tool of `manifest` as a reviewer reads it, by name (JSON-ready); empty for a manifest that does not
    validate (its problems say why)."""
    try:
        parsed = AdapterManifest.model_validate(manifest)
    except ValidationError:
        return {}
    return {spec.name: _review(spec) for spec in parsed.tools}


def review_lines(name: str, review: Mapping[str, Any]) -> list[str]:
    """One tool's review as lines of text, in a fixed order: what a diff between two versions compares."""
    lines = [
        f"tool {name} ({review['mode']}): {review['method']} {review['path']}",
        f"  access: {review['access']}",
        f"  description: {review['description']}",
    ]
    for item in review["inputs"]:
        required = " required" if item["required"] else ""
        lines.append(f"  input {item['name']}: {item['type']}{required}, in {item['travels']}")
    lines += [f"  agent writes freely: {field}" for field in review["agent_text"]]
    lines += [f"  output {item['field']}: {item['type']}, model: {item['model_sees']}" for item in review["outputs"]]
    if review["approval"]:
        lines.append(f"  approval: {review['approval']}")
    for key, value in (review["write_contract"] or {}).items():
        lines.append(f"  write contract {key}: {value}")
    return lines


def _review(spec: ToolSpec) -> dict[str, Any]:
    return {
        "mode": spec.mode,
        "method": spec.method,
        "path": spec.path,
        "description": spec.description,
        "access": "public" if spec.access.public else "roles " + ", ".join(spec.access.roles),
        "inputs": list(_inputs(spec)),
        "outputs": _outputs(spec),
        "agent_text": list(spec.agent_text_fields),
        "approval": None
        if spec.approval is None
        else f"{spec.approval.required} approver(s) with role {spec.approval.approver_role}"
        + "".join(f"; {e.required} above {e.field} {e.above:g}" for e in spec.approval.escalations),
        "write_contract": None if spec.write_contract is None else _contract(spec.write_contract),
    }


def _inputs(spec: ToolSpec) -> Iterator[dict[str, Any]]:
    schema = spec.input_schema
    required = set(schema.get("required", ()))
    placeholders = set(PLACEHOLDER.findall(spec.path))
    default = "query" if spec.method in ("GET", "DELETE") else "body"
    for name, node in (schema.get("properties") or {}).items():
        place = spec.send_as.get(name)
        if place is not None:
            travels = place.into if place.name == name else f"{place.into} as {place.name}"
        else:
            travels = "path" if name in placeholders else default
        yield {"name": name, "type": _type(node), "required": name in required, "travels": travels}


def _outputs(spec: ToolSpec) -> list[dict[str, str]]:
    try:
        model = output_model(
            spec.name, spec.output_schema, untrusted=spec.untrusted_output_fields, shown=spec.shown_untrusted_fields
        )
        seen = dict(model_visibility(model))
    except SchemaError:
        seen = {}
    wrap = wrapped_field(spec.output_schema)
    fields = _leaves(spec.output_schema, wrap or "")
    return [
        {"field": path, "type": kind, "model_sees": seen.get(path, "withheld" if kind == "string" else SHOWN)}
        for path, kind in fields
    ]


def _leaves(schema: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
    """``(path, type)`` of each field that holds a value, at any depth (``items[].title``, ``labels[]``)."""
    kind = _type(schema)
    if kind == "object" and "properties" in schema:
        found: list[tuple[str, str]] = []
        for name, node in schema["properties"].items():
            found += _leaves(node, f"{path}.{name}" if path else name)
        return found
    if kind.startswith("array"):
        return _leaves(schema.get("items") or {}, f"{path}[]")
    return [(path, kind)] if path else []


def _type(node: Mapping[str, Any]) -> str:
    kind = node.get("type", "object" if "properties" in node else "any")
    if isinstance(kind, list):
        kind = "|".join(str(k) for k in kind)
    if kind == "array":
        return f"array of {_type(node.get('items') or {})}"
    if "enum" in node:
        return f"{kind} (one of {', '.join(str(v) for v in node['enum'][:8])})"
    if "format" in node:
        return f"{kind} ({node['format']})"
    return str(kind)


def _contract(contract: WriteContractSpec) -> dict[str, str]:
    """The write contract in words: what an approver needs to trust "exactly once"."""
    key = {
        "header": "the Idempotency-Key header",
        "body_field": f"the body field {contract.key_field}, which the API stores",
        "marker": f"a marker appended to the input {contract.key_field}, which the API stores",
    }[contract.key_in]
    query = "&".join(f"{k}={v}" for k, v in sorted(contract.search_query.items()))
    if contract.status_path is not None:
        lookup = f"GET {contract.status_path} (a status read by key)"
    elif contract.search_path is not None:
        held = "equals the key" if contract.key_in == "body_field" else "holds the marker"
        lookup = (
            f"GET {contract.search_path}{'?' + query if query else ''}, an item whose {contract.match_field} {held}"
        )
    elif contract.state_path is not None:
        lookup = f"GET {contract.state_path}{'?' + query if query else ''} (the target's state), where " + "; ".join(
            _condition(condition) for condition in contract.state_match
        )
    else:
        lookup = "none: an uncertain outcome goes to a person"
    resends = (
        f"with the same key, at most {contract.max_resends} times, while the API remembers it"
        f" ({contract.key_retention_seconds:g} s)"
        if contract.dedupes_on_key
        else "never (the API does not dedupe on the key): a write no lookup settles goes to a person"
    )
    return {
        "key": key,
        "lookup": lookup,
        "resends": resends,
        "reference": contract.reference_field or "-",
        "not applied": ", ".join(str(s) for s in contract.not_applied_statuses) or "-",
        "applied": ", ".join(str(s) for s in contract.applied_statuses) or "-",
    }


def _condition(condition: StateCondition) -> str:
    if condition.equals_argument is not None:
        return f"{condition.field} equals the approved {condition.equals_argument}"
    if condition.includes_argument is not None:
        return f"{condition.field} includes every approved {condition.includes_argument}"
    return f"{condition.field} equals {json.dumps(condition.equals)}"
