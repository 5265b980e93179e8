"""Tools a service offers by manifest, built into the same `Tool` declarations in-process
adapters use, so the executor treats them exactly alike: one access function, one approval
gate, one classification of outcomes.

A manifest's tool calls its backend by method and path template: ``{arg}`` placeholders are
filled from the arguments (percent-encoded, and refused at validation when a value would change the
endpoint, see `fill_path`); the rest go in the query (GET, DELETE) or the JSON body. Write tools
carry their contract (idempotency, status lookup by key) from the manifest.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from pydantic import BaseModel, ValidationError, create_model, field_validator

from gateway.errors import ManifestError, SchemaError, ToolDeclarationError
from gateway.registry.manifest import PLACEHOLDER, AdapterManifest, StateCondition, ToolSpec, WriteContractSpec
from gateway.registry.schema import input_model, output_model, wrapped_field
from gateway.tools.backend_http import fill_path, path_segment_problem, request_json, status_by_key
from gateway.tools.context import ToolContext
from gateway.tools.declarations import (
    Access,
    Approval,
    Escalation,
    Execute,
    Mode,
    Preflight,
    StatusLookup,
    Tool,
    WriteContract,
    WriteStatus,
)
from gateway.tools.preview import Preview, PreviewRead
from gateway.untrusted import model_visibility

__all__ = ["ManifestError", "model_sees", "pinned_tools", "state_matches", "tools_from_manifest"]

logger = logging.getLogger(__name__)

_PLACEHOLDER = PLACEHOLDER


def tools_from_manifest(adapter: str, manifest: AdapterManifest) -> tuple[Tool, ...]:
    """The tools of `manifest`, declared for adapter `adapter`.

    Raises:
        ManifestError: with every problem found (schemas, names, placeholders, declarations).
    """
    problems: list[str] = []
    tools: list[Tool] = []
    for index, spec in enumerate(manifest.tools):
        where = f"tools[{index}] ({spec.name})"
        try:
            tools.append(_tool(adapter, spec, endpoint=manifest.base_url))
        except SchemaError as error:
            problems.extend(f"{where}: {problem}" for problem in error.problems)
        except (ToolDeclarationError, ValueError) as error:
            problems.append(f"{where}: {error}")
    names = [spec.name for spec in manifest.tools]
    problems.extend(f"duplicate tool name {name!r}" for name in sorted({n for n in names if names.count(n) > 1}))
    if problems:
        raise ManifestError(problems)
    return tuple(tools)


def model_sees(manifest: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """For a person reviewing `manifest`: per tool, each string field of its output and what the model is
    shown of it (`gateway.untrusted.model_visibility`: ``trusted: pattern``, ``trusted: enum``, ``shown fenced
    as untrusted``, ``withheld``). Empty for a manifest that does not validate (its problems say why)."""
    try:
        parsed = AdapterManifest.model_validate(manifest)
        return {
            spec.name: dict(
                model_visibility(
                    output_model(
                        spec.name,
                        spec.output_schema,
                        untrusted=spec.untrusted_output_fields,
                        shown=spec.shown_untrusted_fields,
                    )
                )
            )
            for spec in parsed.tools
        }
    except (ValidationError, SchemaError):
        return {}


def _tool(adapter: str, spec: ToolSpec, *, endpoint: str) -> Tool:
    output = output_model(
        spec.name,
        spec.output_schema,
        untrusted=spec.untrusted_output_fields,
        shown=spec.shown_untrusted_fields,
        lenient=spec.output_check == "report",
    )
    placeholders = [_path_argument(spec, name) for name in _PLACEHOLDER.findall(spec.path)]
    target = _PLACEHOLDER.findall(spec.target_path or spec.preview_path or "")
    required = set(spec.input_schema.get("required", ()))
    for name in (*placeholders, *target):
        if name not in required:
            raise ValueError(f"path placeholder {{{name}}} must be a required input")
    arguments = _path_checked(input_model(spec.name, spec.input_schema), {*placeholders, *target})
    write = spec.mode == "write"
    contract = spec.write_contract
    approval = spec.approval
    return Tool(
        name=spec.name,
        adapter=adapter,
        description=spec.description,
        mode=Mode.WRITE if write else Mode.READ,
        arguments=arguments,
        output=output,
        access=Access.public() if spec.access.public else Access.roles(*spec.access.roles),
        execute=_http_call(spec, placeholders, output),
        emits_untrusted_text=bool(spec.untrusted_output_fields or spec.shown_untrusted_fields),
        destructive=spec.destructive,
        open_world=spec.open_world,
        write_contract=None
        if contract is None
        else WriteContract(
            dedupes_on_key=contract.dedupes_on_key,
            key_retention_seconds=contract.key_retention_seconds,
            status_lookup=_lookup(spec, contract),
            reference_field=contract.reference_field or "",
            not_applied_statuses=frozenset(contract.not_applied_statuses),
            applied_statuses=frozenset(contract.applied_statuses),
            max_resends=contract.max_resends,
        ),
        approval=None
        if approval is None
        else Approval(
            approver_role=approval.approver_role,
            required=approval.required,
            escalations=tuple(
                Escalation(field=e.field, above=e.above, required=e.required) for e in approval.escalations
            ),
            decide_within_seconds=approval.decide_within_seconds,
            execute_within_seconds=approval.execute_within_seconds,
        ),
        summary=_summary(spec.summary_template) if write and spec.summary_template else None,
        agent_text_fields=frozenset(spec.agent_text_fields),
        visible_fields=frozenset(spec.visible_fields),
        returns_private_data=spec.returns_private_data,
        preflight=_target_check(spec.target_path, target) if spec.target_path else None,
        preview=_preview(spec.preview_path, target, spec.preview_fields) if spec.preview_path else None,
        timeout_seconds=spec.timeout_seconds,
        endpoint=endpoint,
    )


def _path_argument(spec: ToolSpec, placeholder: str) -> str:
    """The argument that fills `placeholder`: the one of its name, or one declared ``send_as`` it."""
    for arg, place in spec.send_as.items():
        if place.into == "path" and place.name == placeholder:
            return arg
    return placeholder


def _path_checked(model: type[BaseModel], names: set[str]) -> type[BaseModel]:
    """`model`, refusing at validation any value of a path placeholder that `fill_path` would refuse.

    So a value that would change the endpoint is the agent's VALIDATION_ERROR before anything runs,
    and a write never becomes a card that could not be sent.
    """
    if not names:
        return model

    def segment(cls: type[BaseModel], value: Any) -> Any:
        problem = path_segment_problem(str(value))
        if problem is not None:
            raise ValueError(f"not usable in the request path: it {problem}")
        return value

    checked: type[BaseModel] = create_model(
        model.__name__,
        __base__=model,
        __validators__={"path_segments": field_validator(*sorted(names))(segment)},
    )
    return checked


def _http_call(spec: ToolSpec, placeholders: list[str], output: type[BaseModel]) -> Execute:
    wrap = wrapped_field(spec.output_schema)
    check = _reporting_check(spec.name, output) if spec.output_check == "report" else None
    carry = _key_carrier(spec)

    async def execute(args: BaseModel, ctx: ToolContext) -> Any:
        data = args.model_dump(mode="json", exclude_none=True)
        places = {"path": {}, "query": {}, "header": {}, "body": {}}  # type: dict[str, dict[str, Any]]
        default = "query" if spec.method in ("GET", "DELETE") else "body"
        for arg, value in data.items():
            place = spec.send_as.get(arg)
            if place is not None:
                places[place.into][place.name] = value
            else:
                places["path" if arg in placeholders else default][arg] = value
        if carry is not None and ctx.idempotency_key is not None:
            carry(places["body"], ctx.idempotency_key)
        url = fill_path(spec.path, **{name: _text(value) for name, value in places["path"].items()})
        query = [(key, _text(item)) for key, value in places["query"].items() for item in _each(value)]
        headers = {key: _text(value) for key, value in places["header"].items()}
        body = places["body"] if places["body"] or spec.method in ("POST", "PUT", "PATCH") else None
        answer = await request_json(
            ctx, spec.method, url + (f"?{urlencode(query)}" if query else ""), json=body, headers=headers or None
        )
        if wrap is not None:
            # Not an object (a list of issues): MCP's structured content must be one, so it is wrapped.
            answer = {wrap: answer}
        return answer if check is None else check(answer)

    return execute


MARKER = "<!-- countersign:{key} -->"
"""Appended (after a blank line) to the free-text field a ``marker`` contract names: invisible where the API
renders Markdown, and found again by the search lookup."""


def _key_carrier(spec: ToolSpec) -> Any:
    """What puts the write's key into its body (``body_field``, ``marker``); None for the header."""
    contract = spec.write_contract
    if contract is None or contract.key_in == "header" or contract.key_field is None:
        return None
    wire = spec.send_as[contract.key_field].name if contract.key_field in spec.send_as else contract.key_field

    def carry(body: dict[str, Any], key: str) -> None:
        if contract.key_in == "body_field":
            body[wire] = key
        else:
            text = str(body.get(wire) or "")
            body[wire] = f"{text}\n\n{MARKER.format(key=key)}" if text else MARKER.format(key=key)

    return carry


def _lookup(spec: ToolSpec, contract: WriteContractSpec) -> StatusLookup:
    """The contract's lookup: a status read by key, a search read and a match on the stored key, or a read of
    the write's target and a match on its state."""
    if contract.status_path is not None:
        return status_by_key(contract.reference_field or "", contract.status_path)
    if contract.settle_by_person:
        return _no_lookup
    template = contract.search_path or contract.state_path or ""
    placeholders = _PLACEHOLDER.findall(template)
    inputs = set(spec.input_schema.get("properties", {}))
    which = "search_path" if contract.search_path is not None else "state_path"
    if missing := sorted(set(placeholders) - inputs):
        raise ValueError(f"write_contract.{which} placeholders {missing} are not inputs")
    query = sorted(contract.search_query.items())

    def read_url(ctx: ToolContext) -> str:
        approved = ctx.approved_arguments or {}
        url = fill_path(template, **{name: _text(approved.get(name, "")) for name in placeholders})
        return url + (f"?{urlencode(query)}" if query else "")

    if contract.state_path is not None:
        read = {argument for c in contract.state_match if (argument := c.argument()) is not None}
        if unknown := sorted(read - inputs):
            raise ValueError(f"write_contract.state_match reads arguments {unknown} that are not inputs")
        return _state_lookup(contract, read_url)
    if contract.key_field not in inputs:
        raise ValueError(f"write_contract.key_field {contract.key_field!r} is not an input")
    match_field, reference_field = contract.match_field or "", contract.reference_field or ""

    async def lookup(key: str, ctx: ToolContext) -> WriteStatus:
        url = read_url(ctx)
        answer = await request_json(ctx, "GET", url)
        wanted = MARKER.format(key=key) if contract.key_in == "marker" else key
        for item in _items(answer):
            stored = item.get(match_field)
            found = (
                stored == wanted if contract.key_in == "body_field" else isinstance(stored, str) and wanted in stored
            )
            if found:
                reference = item.get(reference_field) if reference_field else None
                detail: dict[str, Any] = {"lookup": url, "matched": match_field}
                if reference_field:
                    detail[reference_field] = reference
                return WriteStatus(
                    state="applied",
                    reference=None if reference is None else str(reference),
                    detail=detail,
                    via="search_match",
                )
        return WriteStatus(state="unknown", detail={"lookup": url, "searched": len(_items(answer))}, via="search_match")

    return lookup


async def _no_lookup(key: str, ctx: ToolContext) -> WriteStatus:
    """A contract that declares no read can settle its write: nothing is asked, and a person settles it."""
    return WriteStatus(state="unknown", detail={"lookup": "none: the write contract leaves it to a person"}, via="none")


def _state_lookup(contract: WriteContractSpec, read_url: Callable[[ToolContext], str]) -> StatusLookup:
    """Read the write's target and check it shows what the approved write asked for (`state_match`).

    A match is ``applied``, with what the read showed and, when the card's preview read the same fields at
    proposal (`ToolContext.preview_facts`), whether they matched already then (``held_at_proposal``): a state
    that held before the write cannot say this write made it. No match is ``unknown``, never ``refused``:
    someone may have changed the target since the write landed.
    """
    conditions = contract.state_match
    reference_field = contract.reference_field or ""

    async def lookup(key: str, ctx: ToolContext) -> WriteStatus:
        url = read_url(ctx)
        answer = await request_json(ctx, "GET", url)
        approved = ctx.approved_arguments or {}
        matched, saw = state_matches(conditions, answer, approved)
        detail: dict[str, Any] = {"lookup": url, "saw": saw, "matched": matched}
        if not matched:
            return WriteStatus(state="unknown", detail=detail, via="state_match")
        before = ctx.preview_facts
        tops = {c.field.split(".")[0].removesuffix("[]") for c in conditions}
        held = state_matches(conditions, before, approved)[0] if before and tops <= set(before) else None
        detail["held_at_proposal"] = held
        reference = answer.get(reference_field) if reference_field and isinstance(answer, Mapping) else None
        return WriteStatus(
            state="applied", reference=None if reference is None else str(reference), detail=detail, via="state_match"
        )

    return lookup


def state_matches(
    conditions: tuple[StateCondition, ...], answer: Any, approved: Mapping[str, Any]
) -> tuple[bool, dict[str, Any]]:
    """Whether `answer` meets every condition on the `approved` arguments, and what it showed of each field read.

    A condition on an argument the write did not set is skipped; with none left, nothing matched."""
    document = answer if isinstance(answer, Mapping) else {"items": answer}
    checked, saw = 0, {}
    for condition in conditions:
        argument = condition.argument()
        if argument is not None and argument not in approved:
            continue
        values = _values(document, condition.field)
        saw[condition.field] = values if "[]" in condition.field else (values[0] if values else None)
        checked += 1
        if condition.includes_argument is not None:
            wanted = approved[condition.includes_argument]
            if not all(item in values for item in (wanted if isinstance(wanted, list) else [wanted])):
                return False, saw
        else:
            expected = condition.equals if condition.equals_argument is None else approved[condition.equals_argument]
            if values != [expected]:
                return False, saw
    return checked > 0, saw


def _values(document: Any, path: str) -> list[Any]:
    """The values at `path` (``labels[].name``) in `document`: one for a plain path, one per item under ``[]``."""
    found = [document]
    for part in path.split("."):
        name, each = part.removesuffix("[]"), part.endswith("[]")
        found = [item[name] for item in found if isinstance(item, Mapping) and name in item]
        if each:
            found = [element for item in found if isinstance(item, list) for element in item]
    return found


def _items(answer: Any) -> list[Mapping[str, Any]]:
    """The items of a search answer: the list itself, or the first list an object holds (``{"items": [...]}``)."""
    found = answer if isinstance(answer, list) else next((v for v in answer.values() if isinstance(v, list)), [])
    return [item for item in found if isinstance(item, Mapping)] if isinstance(answer, list | dict) else []


def _each(value: Any) -> list[Any]:
    # An array in the query is sent as the key repeated (OpenAPI's default: form style, exploded).
    return list(value) if isinstance(value, list) else [value]


def _reporting_check(tool: str, model: type[BaseModel]) -> Any:
    """For ``output_check: report``: an answer with the parts that do not fit `model` left out, and logged.

    The model is shown what fits (every field of such a tool's output is optional); what does not is withheld
    like any undescribed field, so nothing unchecked reaches it. The log names the tool and the places, never
    the values (they are the backend's text)."""

    def check(answer: Any) -> Any:
        for _ in range(_MAX_PRUNES):
            try:
                model.model_validate(answer)
                return answer
            except ValidationError as error:
                places = [tuple(e["loc"]) for e in error.errors()]
            logger.warning("%s: answer does not fit the output schema at %s; those parts withheld", tool, places[:20])
            for place in places:
                answer = _without(answer, place)
        return {}

    return check


_MAX_PRUNES = 5


def _without(value: Any, place: tuple[int | str, ...]) -> Any:
    """`value` with the item or field at `place` removed (pydantic's error location)."""
    if not place:
        return None
    head, rest = place[0], place[1:]
    if isinstance(value, dict) and head in value:
        return (
            {k: v for k, v in value.items() if k != head} if not rest else value | {head: _without(value[head], rest)}
        )
    if isinstance(value, list) and isinstance(head, int) and 0 <= head < len(value):
        if not rest:
            return value[:head] + value[head + 1 :]
        return [*value[:head], _without(value[head], rest), *value[head + 1 :]]
    return value


def _target_check(template: str, placeholders: list[str]) -> Preflight:
    """The write's target must be visible to this caller: a GET that answers 2xx (else NOT_FOUND)."""

    async def preflight(args: BaseModel, ctx: ToolContext) -> None:
        data = args.model_dump(mode="json")
        await request_json(ctx, "GET", fill_path(template, **{name: str(data[name]) for name in placeholders}))

    return preflight


def _preview(template: str, placeholders: list[str], shown: tuple[str, ...]) -> PreviewRead:
    """Read the write's target (2xx, else NOT_FOUND) and show the declared fields of its answer.

    The answer is the backend's text: the lines go to approvers only, escaped by each surface."""

    async def preview(args: BaseModel, ctx: ToolContext) -> Preview:
        data = args.model_dump(mode="json")
        url = fill_path(template, **{name: str(data[name]) for name in placeholders})
        answer = await request_json(ctx, "GET", url)
        values = answer if isinstance(answer, Mapping) else {}
        facts = {name: values.get(name) for name in shown}
        lines = tuple(f"{name}: {json.dumps(value, ensure_ascii=False)[:200]}" for name, value in facts.items())
        return Preview(lines=lines or (f"{url} answers for this caller",), facts={"target": url, **facts})

    return preview


def _summary(template: str) -> Any:
    """Fill ``{arg}`` placeholders only: `str.format` would let a template reach attributes."""

    def render(args: BaseModel) -> str:
        values: Mapping[str, Any] = args.model_dump(mode="json")
        return _PLACEHOLDER.sub(lambda match: _text(values.get(match.group(1), "?")), template)

    return render


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def pinned_tools(pinned: Mapping[str, Mapping[str, Any]], served: list[Tool]) -> list[Tool]:
    """The tools of the pinned manifests (`RegistryStore.pinned`, by adapter name) besides `served`, as a gateway
    builds them; a manifest it could not build is left out (the gateway logs why when it serves the registry).
    For reading a policy set against what a gateway on that store serves, outside of it."""
    names = {tool.name for tool in served}
    found: list[Tool] = []
    for adapter, document in pinned.items():
        try:
            tools = tools_from_manifest(adapter, AdapterManifest.model_validate(document))
        except (ValidationError, ManifestError, ToolDeclarationError):
            continue
        found.extend(tool for tool in tools if tool.name not in names)
    return found
