"""The Cedar schema and entities of the tools served right now, generated from their argument models.

Who calls it: `gateway.cedar.engine`, when a policy set is loaded (the schema validates it) and
per decision (the entities and context). It knows the tool vocabulary and the principal, nothing
of how a decision is used.

The shapes, which ``countersign policy`` documents:

* ``Principal::"<key id>"`` with ``subject``, ``org``, ``kind``, ``key_id``, ``acting_client``,
  ``actors`` (a set), ``token`` (whether a token, not an API key, stands behind it) and ``scopes``
  (a token's scopes; empty for a key); it is ``in`` a ``Role::"<role>"`` for each of its roles.
* ``Tool::"<name>"`` with ``name``, ``adapter`` and ``mode`` (``"read"`` or ``"write"``).
* one action per tool, ``Action::"<tool name>"``, in the group ``Action::"read"`` or
  ``Action::"write"``, both in ``Action::"call"``; its context is ``{ arguments: <the tool's
  arguments as validated> }``, and for a write also ``tainted`` (the proposal followed a read of
  untrusted text).

Argument types: JSON Schema ``integer`` is a Cedar ``Long``, ``string`` a ``String``, ``boolean`` a
``Bool``, an array a ``Set``, an object with properties a ``Record``. A ``number`` (a float) has no
exact Cedar type and is left out, so a policy that reads one fails validation rather than
comparing something else. An argument that may be null is optional (test it with ``has``).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from gateway.principal import TOKEN_KEY_PREFIX, Principal
from gateway.tools.declarations import Mode, Tool

__all__ = ["ACTION_GROUPS", "CedarType", "cedar_schema", "context_of", "entities_of", "tool_type"]

CedarType = dict[str, Any]
"""A Cedar JSON-schema type (``{"type": "Long"}``, ``{"type": "Record", "attributes": ...}``)."""

ACTION_GROUPS = ("call", "read", "write")


def cedar_schema(tools: Iterable[Tool]) -> dict[str, Any]:
    """The Cedar JSON schema for `tools`: entity types, one action per tool, its typed context."""
    actions: dict[str, Any] = {
        "call": {},
        "read": {"memberOf": [{"id": "call"}]},
        "write": {"memberOf": [{"id": "call"}]},
    }
    for tool in tools:
        context: dict[str, Any] = {"arguments": tool_type(tool)}
        if tool.mode is Mode.WRITE:
            context["tainted"] = {"type": "Boolean"}
        actions[tool.name] = {
            "memberOf": [{"id": tool.mode.value}],
            "appliesTo": {
                "principalTypes": ["Principal"],
                "resourceTypes": ["Tool"],
                "context": {"type": "Record", "attributes": context},
            },
        }
    text, strings = {"type": "String"}, {"type": "Set", "element": {"type": "String"}}
    principal = {
        "subject": text,
        "org": text,
        "kind": text,
        "key_id": text,
        "acting_client": text,
        "actors": strings,
        "token": {"type": "Boolean"},
        "scopes": strings,
    }
    entity_types = {
        "Role": {},
        "Principal": {"memberOfTypes": ["Role"], "shape": {"type": "Record", "attributes": principal}},
        "Tool": {"shape": {"type": "Record", "attributes": {"name": text, "adapter": text, "mode": text}}},
    }
    return {"": {"entityTypes": entity_types, "actions": actions}}


def tool_type(tool: Tool) -> CedarType:
    """The Cedar record type of `tool`'s arguments, from the JSON Schema of its argument model."""
    return _record_type(tool.arguments)


@functools.lru_cache(maxsize=1024)
def _record_type(arguments: type[BaseModel]) -> CedarType:
    # Generating a JSON Schema costs far more than a decision; an argument model is fixed once declared.
    schema = arguments.model_json_schema()
    found = _type(schema, schema.get("$defs", {}))
    return found if found is not None else {"type": "Record", "attributes": {}}


def _type(node: Mapping[str, Any], defs: Mapping[str, Any]) -> CedarType | None:
    if "$ref" in node:
        return _type(defs[str(node["$ref"]).rsplit("/", 1)[-1]], defs)
    options = node.get("anyOf")
    if options is not None:
        kept = [option for option in options if option.get("type") != "null"]
        return _type(kept[0], defs) if len(kept) == 1 else None
    kind = node.get("type")
    if kind == "integer":
        return {"type": "Long"}
    if kind == "string":
        return {"type": "String"}
    if kind == "boolean":
        return {"type": "Boolean"}
    if kind == "array" and isinstance(node.get("items"), Mapping):
        element = _type(node["items"], defs)
        return {"type": "Set", "element": element} if element is not None else None
    if kind == "object" and "properties" in node:
        attributes: dict[str, Any] = {}
        for name, prop in node["properties"].items():
            found = _type(prop, defs)
            if found is None:
                continue
            # Arguments arrive as validated, defaults filled in: only a field that may be null can be absent.
            if _nullable(prop):
                found = {**found, "required": False}
            attributes[name] = found
        return {"type": "Record", "attributes": attributes}
    return None


def _nullable(node: Mapping[str, Any]) -> bool:
    return any(option.get("type") == "null" for option in node.get("anyOf", ()))


def context_of(
    tool: Tool,
    arguments: Mapping[str, Any],
    *,
    tainted: bool,
    only: Collection[str] | None = None,
    with_taint: bool = True,
) -> dict[str, Any]:
    """The request context of a call of `tool` with `arguments` (as validated), shaped as its schema says.

    `only`: just these arguments (those the deciding policies read; None: all); `with_taint` False leaves
    ``tainted`` out (no policy reads it). What is left out is what no policy could tell apart.
    """
    kind = tool_type(tool)
    if only is None:
        value = _value(kind, arguments)
        record: dict[str, Any] = value if value is not None else {}
    else:
        record = {}
        for name in only:
            sub = kind["attributes"].get(name)
            converted = _value(sub, arguments.get(name)) if sub is not None else None
            if converted is not None:
                record[name] = converted
    context: dict[str, Any] = {"arguments": record}
    if tool.mode is Mode.WRITE and with_taint:
        context["tainted"] = tainted
    return context


def _value(kind: CedarType, value: Any) -> Any:
    if value is None:
        return None
    match kind["type"]:
        case "Record":
            if not isinstance(value, Mapping):
                return None
            out = {}
            for name, sub in kind["attributes"].items():
                converted = _value(sub, value.get(name))
                if converted is not None:
                    out[name] = converted
            return out
        case "Set":
            items = [_value(kind["element"], item) for item in value] if isinstance(value, list | tuple) else []
            return [item for item in items if item is not None]
        case "Long":
            return value if isinstance(value, int) and not isinstance(value, bool) else None
        case "Boolean":
            return value if isinstance(value, bool) else None
        case _:
            return value if isinstance(value, str) else None


def principal_uid(principal: Principal) -> dict[str, str]:
    return {"type": "Principal", "id": principal.key_id or principal.subject}


def entities_of(tool: Tool, principal: Principal) -> list[dict[str, Any]]:
    """The entities one decision reads: the principal (in its roles), its roles, the tool and its actions."""
    roles = sorted(principal.roles)
    return [
        {
            "uid": principal_uid(principal),
            "attrs": {
                "subject": principal.subject,
                "org": principal.org,
                "kind": principal.kind.value,
                "key_id": principal.key_id,
                "acting_client": principal.acting_client,
                "actors": list(principal.actors),
                "token": principal.key_id.startswith(TOKEN_KEY_PREFIX) or principal.scopes is not None,
                "scopes": sorted(principal.scopes or ()),
            },
            "parents": [{"type": "Role", "id": role} for role in roles],
        },
        *({"uid": {"type": "Role", "id": role}, "attrs": {}, "parents": []} for role in roles),
        # The action hierarchy, so ``action in Action::"write"`` holds without the schema at decision time.
        {
            "uid": {"type": "Action", "id": tool.name},
            "attrs": {},
            "parents": [{"type": "Action", "id": tool.mode.value}],
        },
        {"uid": {"type": "Action", "id": tool.mode.value}, "attrs": {}, "parents": [{"type": "Action", "id": "call"}]},
        {"uid": {"type": "Action", "id": "call"}, "attrs": {}, "parents": []},
        {
            "uid": {"type": "Tool", "id": tool.name},
            "attrs": {"name": tool.name, "adapter": tool.adapter, "mode": tool.mode.value},
            "parents": [],
        },
    ]
