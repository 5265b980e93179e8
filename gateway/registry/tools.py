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
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError, create_model, field_validator

from gateway.errors import ManifestError, SchemaError, ToolDeclarationError
from gateway.registry.manifest import PLACEHOLDER, AdapterManifest, ToolSpec
from gateway.registry.schema import input_model, output_model
from gateway.tools.backend_http import fill_path, path_segment_problem, request_json, status_by_key
from gateway.tools.context import ToolContext
from gateway.tools.declarations import Access, Approval, Escalation, Execute, Mode, Preflight, Tool, WriteContract
from gateway.tools.preview import Preview, PreviewRead
from gateway.untrusted import model_visibility

__all__ = ["ManifestError", "model_sees", "tools_from_manifest"]

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
            tools.append(_tool(adapter, spec))
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


def _tool(adapter: str, spec: ToolSpec) -> Tool:
    output = output_model(
        spec.name, spec.output_schema, untrusted=spec.untrusted_output_fields, shown=spec.shown_untrusted_fields
    )
    placeholders = _PLACEHOLDER.findall(spec.path)
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
        execute=_http_call(spec, placeholders),
        emits_untrusted_text=bool(spec.untrusted_output_fields or spec.shown_untrusted_fields),
        destructive=spec.destructive,
        open_world=spec.open_world,
        write_contract=None
        if contract is None
        else WriteContract(
            dedupes_on_key=contract.dedupes_on_key,
            key_retention_seconds=contract.key_retention_seconds,
            status_lookup=status_by_key(contract.reference_field, contract.status_path),
            reference_field=contract.reference_field,
            not_applied_statuses=frozenset(contract.not_applied_statuses),
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
    )


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


def _http_call(spec: ToolSpec, placeholders: list[str]) -> Execute:
    async def execute(args: BaseModel, ctx: ToolContext) -> Any:
        data = args.model_dump(mode="json", exclude_none=True)
        url = fill_path(spec.path, **{name: str(data.pop(name)) for name in placeholders})
        if spec.method in ("GET", "DELETE"):
            return await request_json(ctx, spec.method, url, params={k: _text(v) for k, v in data.items()})
        return await request_json(ctx, spec.method, url, json=data)

    return execute


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
