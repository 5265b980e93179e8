"""An upstream's reviewed tools as `Tool` declarations, so the executor treats them like every other tool.

Names are namespaced ``<upstream>_<tool>``, and a name already served (a built-in tool, another
backend's) is never replaced: the upstream's tool is quarantined instead (``shadows``). A tool reviewed
*read* runs through the access check, and its text is third-party text (withheld from the model, shown
to people) unless the review says ``trusted_output``. A tool reviewed *write* is exposed only as an
approval-card creator: its arguments are validated against the upstream's ``inputSchema`` when the
card is proposed, its preview (a read of the same upstream) is shown on the card, and after approval
the worker calls it once. MCP has no idempotency key, so the write contract never allows a resend: an
unknown outcome is settled by the review's lookup (a read and a match rule), else by a person. When the
preview makes the lookup's very read (same tool, same arguments), it also records whether the lookup's
match held already at proposal, so the card can say whether the state the lookup finds was there before.

Who calls it: the composition root, with the connection it supervises for the upstream.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Collection, Mapping, Sequence
from typing import Annotated, Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError as JsonSchemaError
from mcp.types import CallToolResult
from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from gateway.config.upstreams import ArgumentMap, LookupRule, PreviewRule, ToolReview
from gateway.errors import ToolDeclarationError, UpstreamRefusedError
from gateway.tools.context import ToolContext
from gateway.tools.declarations import Access, Approval, Execute, Mode, StatusLookup, Tool, WriteContract, WriteStatus
from gateway.tools.preview import Preview, PreviewRead
from gateway.untrusted import TrustedText, Untrusted
from gateway.upstreams.connection import NOT_APPLIED_STATUS, UpstreamConnection
from gateway.upstreams.review import Quarantined, definition_hash, sort_listing

__all__ = ["UpstreamReadText", "UpstreamTrustedText", "UpstreamWriteResult", "upstream_tools"]

_PREVIEW_LINES = 60


class UpstreamReadText(BaseModel):
    """A read's text content: third-party text, for people only."""

    text: Untrusted


class UpstreamTrustedText(BaseModel):
    """A read's text content, declared trusted at review (``trusted_output``): a person vouched for who wrote it."""

    text: Annotated[str, TrustedText("declared trusted at review (trusted_output)")]


class UpstreamWriteResult(BaseModel):
    """What an applied upstream write answered (third-party text), and no reference: MCP has none."""

    text: Untrusted
    reference: str = ""


def upstream_tools(
    upstream: str,
    listing: Sequence[Mapping[str, Any]],
    reviews: Mapping[str, ToolReview],
    connection: UpstreamConnection,
    *,
    taken: Collection[str],
) -> tuple[tuple[Tool, ...], tuple[Quarantined, ...]]:
    """The served tools of `upstream`'s `listing` under `reviews`, and those held back with why.

    `taken` are the names already served by others: a tool of this upstream never shadows one.
    """
    sorted_ = sort_listing(listing, reviews)
    held = list(sorted_.quarantined)
    tools: list[Tool] = []
    reads = {name for name, (_definition, review) in sorted_.served.items() if review.mode == "read"}
    for name, (definition, review) in sorted_.served.items():
        listed = definition_hash(definition)
        full = f"{upstream}_{name}"
        if full in taken:
            held.append(Quarantined(name=name, reason="shadows", listed_hash=listed, suggestion={}))
            continue
        # A preview runs when a card is proposed and a lookup before anyone decides: both must be tools a
        # person reviewed as reads of this upstream, served as listed, so neither can ever run a write.
        unread = [rule.tool for rule in (review.preview, review.lookup) if rule is not None and rule.tool not in reads]
        if unread:
            reason = f"unusable: preview or lookup names {sorted(unread)}, not a reviewed read of {upstream}"
            held.append(Quarantined(name=name, reason=reason, listed_hash=listed, suggestion={}))
            continue
        try:
            tools.append(_tool(upstream, name, definition, review, connection))
        except (ToolDeclarationError, JsonSchemaError, ValueError) as error:
            held.append(Quarantined(name=name, reason=f"unusable: {error}", listed_hash=listed, suggestion={}))
    return tuple(tools), tuple(held)


def _tool(
    upstream: str, name: str, definition: Mapping[str, Any], review: ToolReview, connection: UpstreamConnection
) -> Tool:
    arguments = arguments_model(f"{upstream}_{name}", definition.get("inputSchema") or {"type": "object"})
    description = str(definition.get("description") or name)
    access = Access.public() if review.public else Access.roles(*review.roles)
    common: dict[str, Any] = {
        "name": f"{upstream}_{name}",
        "adapter": upstream,
        "description": description,
        "arguments": arguments,
        "access": access,
        "timeout_seconds": review.timeout_seconds,
        "open_world": None,
    }
    if review.mode == "read" and review.trusted_output:
        return Tool(
            **common,
            mode=Mode.READ,
            output=UpstreamTrustedText,
            execute=_read(connection, name, review.timeout_seconds),
        )
    if review.mode == "read":
        # Third-party text: the model's projection has it withheld; people get the text as the upstream gave it.
        return Tool(
            **common,
            mode=Mode.READ,
            output=UpstreamReadText,
            execute=_read(connection, name, review.timeout_seconds),
            emits_untrusted_text=True,
            model_view=_withheld_view,
            model_view_output=UpstreamReadText,
            human_view=_text_for_people,
        )
    return Tool(
        **common,
        mode=Mode.WRITE,
        output=UpstreamWriteResult,
        execute=_write(connection, name, review.timeout_seconds),
        emits_untrusted_text=True,
        write_contract=WriteContract(
            dedupes_on_key=False,  # MCP has no idempotency key: never a resend
            key_retention_seconds=1.0,
            status_lookup=_lookup(connection, review.lookup, review.timeout_seconds),
            reference_field="reference",
            not_applied_statuses=frozenset({NOT_APPLIED_STATUS}),
        ),
        approval=Approval(approver_role=review.approver_role),
        summary=lambda _args: f"call {name} on the MCP server {upstream} (never resent automatically)",
        agent_text_fields=frozenset(arguments.model_fields),
        preview=_preview(connection, review.preview, review.lookup, review.timeout_seconds) if review.preview else None,
        destructive=True,
    )


def _withheld_view(output: UpstreamReadText) -> Mapping[str, Any]:
    """What the model sees of a third-party read: the output as the executor withheld it."""
    return output.model_dump(mode="json")


def _text_for_people(output: UpstreamReadText) -> str:
    return output.text


def arguments_model(name: str, schema: Mapping[str, Any]) -> type[BaseModel]:
    """A closed model for an upstream's ``inputSchema``: one field per property (by its JSON name), the
    whole schema checked by a validator compiled once, and the schema itself published to agents.

    Raises:
        jsonschema.exceptions.SchemaError: the upstream's schema is not a valid JSON Schema.
    """
    Draft202012Validator.check_schema(dict(schema))
    validator = Draft202012Validator(dict(schema))
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    fields: dict[str, Any] = {}
    for prop in properties:
        if not prop.isidentifier() or prop.startswith("_") or hasattr(BaseModel, prop):
            # The card stores arguments by field name; a name a model cannot hold as one is not served.
            raise ValueError(f"argument name {prop!r} cannot be a field name")
        fields[prop] = (Any, Field(default=... if prop in required else None))

    def published(document: dict[str, Any]) -> None:
        document.clear()
        document.update({key: value for key, value in schema.items() if key != "$schema"})
        document["additionalProperties"] = False

    def against_schema(model: BaseModel) -> BaseModel:
        errors = sorted(validator.iter_errors(_sent(model)), key=str)
        if errors:
            where = "/".join(str(part) for part in errors[0].absolute_path) or "(arguments)"
            raise ValueError(f"{where}: does not match the upstream's input schema ({errors[0].validator})")
        return model

    checks: dict[str, Any] = {"against_schema": model_validator(mode="after")(against_schema)}
    model: type[BaseModel] = create_model(
        "".join(part.capitalize() for part in name.replace("-", "_").split("_")) + "Args",
        __config__=ConfigDict(extra="forbid", json_schema_extra=published),
        __validators__=checks,
        **fields,
    )
    return model


def _sent(args: BaseModel) -> dict[str, Any]:
    """The arguments as the upstream receives them: an optional argument not given is left out, not null."""
    return args.model_dump(exclude_none=True)


def _text(result: CallToolResult) -> str:
    return "\n".join(
        str(getattr(block, "text", "")) for block in result.content if getattr(block, "type", "") == "text"
    )


async def _call(connection: UpstreamConnection, tool: str, arguments: Mapping[str, Any], timeout: float) -> str:
    result = await connection.call_tool(tool, arguments, timeout=timeout)
    if result.is_error:
        # The upstream ran the tool and says it failed: nothing applied, by its own account.
        raise UpstreamRefusedError(
            f"upstream {connection.name} answered {tool} with an error",
            service=connection.name,
            status=NOT_APPLIED_STATUS,
            reason="is_error",
        )
    return _text(result)


def _read(connection: UpstreamConnection, tool: str, timeout: float) -> Execute:
    async def execute(args: BaseModel, ctx: ToolContext) -> Mapping[str, Any]:
        return {"text": await _call(connection, tool, _sent(args), timeout)}

    return execute


def _write(connection: UpstreamConnection, tool: str, timeout: float) -> Execute:
    async def execute(args: BaseModel, ctx: ToolContext) -> Mapping[str, Any]:
        return {"text": await _call(connection, tool, _sent(args), timeout), "reference": ""}

    return execute


def _mapped(rule: ArgumentMap, values: Mapping[str, Any]) -> dict[str, Any]:
    return {theirs: values.get(ours) for theirs, ours in rule.items()}


def _preview(
    connection: UpstreamConnection, rule: PreviewRule, lookup: LookupRule | None, timeout: float
) -> PreviewRead:
    """Read the write's target now; with `compare`, a diff of what the write will change.

    When `lookup` reads what this preview reads (same tool, same arguments for this write), the facts also
    say whether its match held already (``lookup_matched``, with the read and rule it was checked by, as
    ``lookup``): nothing there yet is no match. Upstream text: the lines go to approvers only, escaped by
    each surface."""

    async def preview(args: BaseModel, ctx: ToolContext) -> Preview:
        values = _sent(args)
        try:
            current: str | None = await _call(connection, rule.tool, _mapped(rule.arguments, values), timeout)
        except UpstreamRefusedError:
            current = None  # nothing there yet (a new file): the write creates it
        lines = [f"current ({rule.tool}):"]
        lines += ["  (nothing)"] if current is None else [f"  {line}" for line in current.splitlines()[:_PREVIEW_LINES]]
        after = _after(rule, current, values)
        if after is not None:
            diff = difflib.unified_diff((current or "").splitlines(), after.splitlines(), "now", "after", lineterm="")
            lines += ["diff:", *(f"  {line}" for line in list(diff)[:_PREVIEW_LINES])]
        if rule.renames is not None:
            moved = (values.get(rule.renames.source), values.get(rule.renames.destination))
            lines += ["diff:", "  --- now", "  +++ after", f"  -{moved[0]}", f"  +{moved[1]}"]
        digest = hashlib.sha256((current or "").encode()).hexdigest() if current is not None else None
        facts: dict[str, Any] = {"read": rule.tool, "current_sha256": digest}
        if lookup is not None and _lookup_read(lookup, values)["read"] == {rule.tool: _mapped(rule.arguments, values)}:
            facts |= {"lookup": _lookup_read(lookup, values), "lookup_matched": _matches(lookup, current, values)}
        return Preview(lines=tuple(lines), facts=facts)

    return preview


def _after(rule: PreviewRule, current: str | None, values: Mapping[str, Any]) -> str | None:
    """What the write would leave, for the diff: the new content, or the current text with the edits applied
    (an edit whose text is not found is shown as not applying: the upstream will refuse or skip it)."""
    if rule.compare is not None:
        return str(values.get(rule.compare, ""))
    if rule.edits is None:
        return None
    text = current or ""
    items = values.get(rule.edits.argument)
    for item in items if isinstance(items, list) else ():
        if isinstance(item, Mapping) and item.get(rule.edits.old):
            text = text.replace(str(item.get(rule.edits.old, "")), str(item.get(rule.edits.new, "")), 1)
    return text


def _lookup(connection: UpstreamConnection, rule: LookupRule | None, timeout: float) -> StatusLookup:
    """Settle an unknown write by reading the upstream and matching the approved arguments; never
    ``refused`` (a missing match does not prove the write did not land and get changed since)."""

    async def status(key: str, ctx: ToolContext) -> WriteStatus:
        approved = ctx.approved_arguments
        if rule is None or approved is None:
            return WriteStatus(state="unknown", detail={"lookup": "none declared: a person settles it"}, via="none")
        text = await _call(connection, rule.tool, _mapped(rule.arguments, approved), timeout)
        found = _matches(rule, text, approved)
        detail: dict[str, Any] = {"lookup": rule.tool, "matched": found}
        if found:
            # A state that held before the write cannot say this write made it: compared with the preview's read
            # at proposal when it was this very read and rule (None: no such read, it may have held before).
            before = ctx.preview_facts or {}
            held = before.get("lookup_matched") if before.get("lookup") == _lookup_read(rule, approved) else None
            detail["held_at_proposal"] = held if isinstance(held, bool) else None
        # No key travels to an MCP server: what settles it is the state its read shows (`gateway.cards.settlement`).
        return WriteStatus(state="applied" if found else "unknown", detail=detail, via="state_match")

    return status


def _matches(rule: LookupRule, text: str | None, approved: Mapping[str, Any]) -> bool:
    """Whether the read's `text` (None: nothing there) shows the write `approved` by `rule`."""
    if text is None:
        return False
    if rule.equals is not None:
        return text == str(approved.get(rule.equals, ""))
    return str(approved.get(rule.contains or "", "")) in text


def _lookup_read(rule: LookupRule, approved: Mapping[str, Any]) -> dict[str, Any]:
    """The lookup's read and rule for the write `approved` (JSON, as a card's preview facts keep it)."""
    match = {"equals": rule.equals} if rule.equals is not None else {"contains": rule.contains}
    return {"read": {rule.tool: _mapped(rule.arguments, approved)}, **match}
