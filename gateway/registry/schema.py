"""JSON Schema (a small, explicit subset) to pydantic models, so a remote tool is validated exactly
like an in-process one: the schema the agent sees and the validator the executor uses are one.

Input schemas must be closed objects: ``{"type": "object", "properties": {...}, "required": [...],
"additionalProperties": false}`` whose properties are strings (``minLength``, ``maxLength``,
``pattern``, ``enum``, ``format: date``), integers and numbers (``minimum``, ``maximum``,
``exclusiveMinimum``, ``exclusiveMaximum``) or booleans. Output schemas may nest objects and
arrays. An output string is third-party text, withheld from the model at any depth, unless its schema
declares it trusted (``pattern``, ``enum``, ``format: date``: `gateway.untrusted`); string fields named in
``untrusted`` (``note``, ``reports[].note``, ``notes[].tags[]`` for the strings of a list, ``grid[][]`` for
a list of lists) become `Untrusted` explicitly, and those named in ``shown`` become `ShownUntrusted`:
fenced, the one third-party text the model reads.
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

__all__ = ["SchemaError", "input_model", "output_model"]

_SCALARS = {"string", "integer", "number", "boolean"}
_STRING_KEYS = {"minLength": "min_length", "maxLength": "max_length", "pattern": "pattern"}
_NUMBER_KEYS = {"minimum": "ge", "maximum": "le", "exclusiveMinimum": "gt", "exclusiveMaximum": "lt"}
_ANNOTATIONS = {"title", "description", "examples", "default", "format", "enum", "type"}


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
    fields: dict[str, Any] = {}
    for prop, spec in properties.items():
        annotation = _scalar(f"input_schema.properties.{prop}", spec, problems)
        info = Field(description=spec.get("description")) if isinstance(spec, Mapping) else Field()
        fields[prop] = (annotation, info) if prop in required else (annotation | None, Field(default=None))
    if problems:
        raise SchemaError(problems)
    return _model(f"{_camel(name)}Args", ConfigDict(extra="forbid", strict=False), fields)


def output_model(
    name: str, schema: Mapping[str, Any], *, untrusted: tuple[str, ...] = (), shown: tuple[str, ...] = ()
) -> type[BaseModel]:
    """A pydantic model for a tool's output; fields at `untrusted` paths become `Untrusted`, at `shown`
    paths `ShownUntrusted`.

    Raises:
        SchemaError: the schema is not an object, or a marked path names no string field.
    """
    problems: list[str] = []
    marked = {path: Untrusted for path in untrusted} | {path: ShownUntrusted for path in shown}
    found: set[str] = set()
    model = _object(f"{_camel(name)}Out", schema, "", marked, found, problems)
    for path in sorted(set(marked) - found):
        which = "shown_untrusted_fields" if path in shown else "untrusted_output_fields"
        problems.append(f"{which}: {path!r} is not a string field of the output schema")
    if problems:
        raise SchemaError(problems)
    return model


def _object(
    name: str, schema: Mapping[str, Any], prefix: str, marked: Mapping[str, Any], found: set[str], problems: list[str]
) -> type[BaseModel]:
    if schema.get("type") != "object":
        problems.append(f"output_schema{'.' + prefix if prefix else ''}: type must be object")
        return _model(name, ConfigDict(), {})
    required = set(schema.get("required", ()))
    fields: dict[str, Any] = {}
    for prop, spec in (schema.get("properties") or {}).items():
        path = f"{prefix}{prop}"
        annotation = _output_type(f"{name}{_camel(prop)}", spec, path, marked, found, problems)
        fields[prop] = (annotation, ...) if prop in required else (annotation | None, None)
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
