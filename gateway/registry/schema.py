"""JSON Schema (a small, explicit subset) to pydantic models, so a remote tool is validated exactly
like an in-process one: the schema the agent sees and the validator the executor uses are one.

Input schemas must be closed objects: ``{"type": "object", "properties": {...}, "required": [...],
"additionalProperties": false}`` whose properties are strings (``minLength``, ``maxLength``,
``pattern``, ``enum``, ``format: date``), integers and numbers (``minimum``, ``maximum``,
``exclusiveMinimum``, ``exclusiveMaximum``), booleans, arrays of any of these (``items``, ``minItems``,
``maxItems``) and nested objects, closed the same way (a JSON body's ``labels: [...]`` or
``author: {name, email}``). ``description``, ``default``, ``format``, ``enum`` and ``examples`` are kept
in the schema the agent is listed with; the gateway sends only what the agent gave, so a ``default`` is
the backend's to apply. Output schemas may nest objects and arrays. An output string is third-party text,
withheld from the model at any depth, unless its schema declares it trusted (``pattern``, ``enum``,
``format: date``: `gateway.untrusted`); string fields named in ``untrusted`` (``note``, ``reports[].note``,
``notes[].tags[]`` for the strings of a list, ``grid[][]`` for a list of lists) become `Untrusted`
explicitly, and those named in ``shown`` become `ShownUntrusted`: fenced, the one third-party text the
model reads.

An output that is not an object (GitHub's list endpoints answer a JSON array) is wrapped: the model is an
object with one field, ``items`` for an array and ``value`` for anything else (`WRAPPED_FIELDS`), because
MCP 2025-11-25 requires ``structuredContent`` to be an object; the field's description says so, and the
untrusted paths of such an output start with it (``items[].title``). `wrapped_field` tells a caller which.
Anything outside the subset is refused with a problem naming where it is.
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic_core import SchemaError as PydanticSchemaError
from pydantic_core import SchemaValidator, core_schema

from gateway.errors import SchemaError
from gateway.untrusted import ShownUntrusted, Untrusted

__all__ = ["WRAPPED_FIELDS", "SchemaError", "input_model", "output_model", "wrapped_field"]

_SCALARS = {"string", "integer", "number", "boolean"}
_STRING_KEYS = {"minLength": "min_length", "maxLength": "max_length", "pattern": "pattern"}
_NUMBER_KEYS = {"minimum": "ge", "maximum": "le", "exclusiveMinimum": "gt", "exclusiveMaximum": "lt"}
_ANNOTATIONS = {"title", "description", "examples", "default", "format", "enum", "type"}
_SHOWN = ("title", "description", "examples", "default", "format")
"""Annotations kept in the listed input schema (``enum`` is the `Literal` itself)."""
_ARRAY_KEYS = {"minItems": "min_length", "maxItems": "max_length"}
WRAPPED_FIELDS = {"array": "items", "scalar": "value"}
"""The one field of the object that wraps an output that is not one."""
_WRAP_NOTE = (
    "The API's answer is a JSON {kind}; it is given under this field because an MCP result's structured content"
    " must be an object."
)


def wrapped_field(schema: Mapping[str, Any]) -> str | None:
    """The field an output of `schema` is wrapped in (``items``, ``value``), or None for an object."""
    kind = schema.get("type", "object" if "properties" in schema else None)
    if kind == "object":
        return None
    return WRAPPED_FIELDS["array"] if kind == "array" else WRAPPED_FIELDS["scalar"]


def input_model(name: str, schema: Mapping[str, Any]) -> type[BaseModel]:
    """A closed pydantic model for a tool's input schema.

    Raises:
        SchemaError: the schema is not a closed object of supported scalar properties.
    """
    problems: list[str] = []
    if schema.get("type") != "object":
        problems.append("input_schema: type must be object")
    if schema.get("additionalProperties") is not False:
        problems.append("input_schema: additionalProperties must be false (closed)")
    required = set(schema.get("required", ()))
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        raise SchemaError([*problems, "input_schema: properties must be an object"])
    missing = required - set(properties)
    if missing:
        problems.append(f"input_schema: required names unknown properties {sorted(missing)}")
    fields = _input_fields("input_schema", properties, required, problems)
    if problems:
        raise SchemaError(problems)
    return _model(f"{_camel(name)}Args", ConfigDict(extra="forbid", strict=False), fields)


def _input_fields(where: str, properties: Mapping[str, Any], required: set[str], problems: list[str]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for prop, spec in properties.items():
        at = f"{where}.properties.{prop}"
        annotation = _input_type(at, spec, problems)
        shown = {key: spec[key] for key in _SHOWN if isinstance(spec, Mapping) and key in spec and key != "description"}
        description = spec.get("description") if isinstance(spec, Mapping) else None
        extra = _jsonable(shown) or None
        if prop in required:
            fields[prop] = (annotation, Field(description=description, json_schema_extra=extra))
        else:
            fields[prop] = (annotation | None, Field(None, description=description, json_schema_extra=extra))
    return fields


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    # A default of None would read as "null is the default"; leave it out.
    return {key: value for key, value in values.items() if value is not None}


def _input_type(where: str, spec: Any, problems: list[str]) -> Any:
    if not isinstance(spec, Mapping):
        problems.append(f"{where}: must be a schema object")
        return Any
    kind = spec.get("type")
    if kind == "array":
        if unsupported := set(spec) - _ANNOTATIONS - set(_ARRAY_KEYS) - {"items", "uniqueItems"}:
            problems.append(f"{where}: unsupported keyword(s) {sorted(unsupported)}")
        item = _input_type(f"{where}.items", spec.get("items", {}), problems)
        bounds = {_ARRAY_KEYS[k]: v for k, v in spec.items() if k in _ARRAY_KEYS}
        return Annotated[list[item], Field(**bounds)] if bounds else list[item]  # type: ignore[valid-type]
    if kind == "object":
        if spec.get("additionalProperties") is not False:
            problems.append(f"{where}: additionalProperties must be false (closed)")
        if unsupported := set(spec) - _ANNOTATIONS - {"properties", "required", "additionalProperties"}:
            problems.append(f"{where}: unsupported keyword(s) {sorted(unsupported)}")
        inner = spec.get("properties") or {}
        if not isinstance(inner, Mapping):
            problems.append(f"{where}: properties must be an object")
            return Any
        fields = _input_fields(where, inner, set(spec.get("required", ())), problems)
        return _model(_camel(where.replace(".", "_")), ConfigDict(extra="forbid", strict=False), fields)
    return _scalar(where, spec, problems)


def output_model(
    name: str,
    schema: Mapping[str, Any],
    *,
    untrusted: tuple[str, ...] = (),
    shown: tuple[str, ...] = (),
    lenient: bool = False,
) -> type[BaseModel]:
    """A pydantic model for a tool's output; fields at `untrusted` paths become `Untrusted`, at `shown`
    paths `ShownUntrusted`. `lenient` makes every field optional at every depth (for a tool whose
    mismatches are reported, not refused).

    Raises:
        SchemaError: the schema is not an object, or a marked path names no string field.
    """
    problems: list[str] = []
    marked = {path: Untrusted for path in untrusted} | {path: ShownUntrusted for path in shown}
    found: set[str] = set()
    schema = _optional_everywhere(schema) if lenient else schema
    field = wrapped_field(schema)
    if field is None:
        model = _object(f"{_camel(name)}Out", schema, "", marked, found, problems)
    else:
        kind = "array" if field == WRAPPED_FIELDS["array"] else "value"
        wrapper = {"type": "object", "properties": {field: schema}, "required": [field]}
        model = _object(f"{_camel(name)}Out", wrapper, "", marked, found, problems, note=_WRAP_NOTE.format(kind=kind))
    for path in sorted(set(marked) - found):
        which = "shown_untrusted_fields" if path in shown else "untrusted_output_fields"
        problems.append(f"{which}: {path!r} is not a string field of the output schema")
    if problems:
        raise SchemaError(problems)
    return model


def _optional_everywhere(schema: Any) -> Any:
    if isinstance(schema, Mapping):
        return {key: _optional_everywhere(value) for key, value in schema.items() if key != "required"}
    return [_optional_everywhere(item) for item in schema] if isinstance(schema, list) else schema


def _object(
    name: str,
    schema: Mapping[str, Any],
    prefix: str,
    marked: Mapping[str, Any],
    found: set[str],
    problems: list[str],
    *,
    note: str | None = None,
) -> type[BaseModel]:
    if schema.get("type") != "object":
        problems.append(f"output_schema{'.' + prefix if prefix else ''}: type must be object")
        return _model(name, ConfigDict(), {})
    required = set(schema.get("required", ()))
    fields: dict[str, Any] = {}
    for prop, spec in (schema.get("properties") or {}).items():
        path = f"{prefix}{prop}"
        annotation = _output_type(f"{name}{_camel(prop)}", spec, path, marked, found, problems)
        info = Field(description=note) if note else Field()
        fields[prop] = (annotation, info) if prop in required else (annotation | None, Field(None, description=note))
    # Backends may add fields the manifest does not describe; they are dropped, never passed on.
    return _model(name, ConfigDict(extra="ignore"), fields)


def _model(name: str, config: ConfigDict, fields: Mapping[str, Any]) -> type[BaseModel]:
    """A model of a manifest's object. Its property names are the API's JSON names, so one may shadow an
    attribute of `BaseModel` (``json``, ``copy``, ``mro``): pydantic warns, and the field works, since the
    gateway never calls those old methods on these models. The warning is about our own construction,
    not about the service's input, so it is silenced here rather than reported (or raised in tests)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Field name .* shadows an attribute in parent", category=UserWarning)
        model: type[BaseModel] = create_model(name, __config__=config, **fields)
    return model


def _output_type(
    name: str, spec: Any, path: str, marked: Mapping[str, Any], found: set[str], problems: list[str]
) -> Any:
    if not isinstance(spec, Mapping):
        problems.append(f"output_schema.{path}: must be a schema object")
        return Any
    kind = spec.get("type")
    if kind == "object":
        return _object(name, spec, f"{path}.", marked, found, problems)
    if kind == "array":
        items = spec.get("items", {})
        item: Any = _output_type(name + "Item", items, f"{path}[]", marked, found, problems)
        return list[item]
    if path in marked:
        if kind != "string":
            problems.append(f"untrusted_output_fields: {path!r} is not a string")
        found.add(path)
        return marked[path]
    return _scalar(f"output_schema.{path}", spec, problems)


def _scalar(where: str, spec: Any, problems: list[str]) -> Any:
    if not isinstance(spec, Mapping):
        problems.append(f"{where}: must be a schema object")
        return Any
    kind = spec.get("type")
    if kind not in _SCALARS:
        problems.append(f"{where}: type {kind!r} is not supported (string, integer, number, boolean)")
        return Any
    unsupported = set(spec) - _ANNOTATIONS - set(_STRING_KEYS) - set(_NUMBER_KEYS)
    if unsupported:
        problems.append(f"{where}: unsupported keyword(s) {sorted(unsupported)}")
    if "enum" in spec:
        values = tuple(spec["enum"])
        if not values:
            problems.append(f"{where}: enum is empty")
            return Any
        return Literal[values]
    if kind == "string":
        if spec.get("format") == "date":
            return dt.date
        constraints = {_STRING_KEYS[k]: v for k, v in spec.items() if k in _STRING_KEYS}
        if "pattern" in constraints and not _pattern_compiles(where, constraints["pattern"], problems):
            return Any
        return Annotated[str, Field(**constraints)] if constraints else str
    if kind == "boolean":
        return bool
    base: type = int if kind == "integer" else float
    bounds = {_NUMBER_KEYS[k]: v for k, v in spec.items() if k in _NUMBER_KEYS}
    return Annotated[base, Field(**bounds)] if bounds else base


def _pattern_compiles(where: str, pattern: Any, problems: list[str]) -> bool:
    """Whether the validator's regex engine takes `pattern` (it has no look-around and no back-references,
    as a JSON Schema validator may): one that it refuses is the manifest's problem, said plainly, not an
    error building the model."""
    if not isinstance(pattern, str):
        problems.append(f"{where}: pattern must be a string")
        return False
    try:
        SchemaValidator(core_schema.str_schema(pattern=pattern))
    except PydanticSchemaError as refused:
        why = str(refused).strip().splitlines()[-1].removeprefix("error: ")
        problems.append(f"{where}: pattern {pattern!r} is not supported: {why}")
        return False
    return True


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("-", "_").split("_"))
