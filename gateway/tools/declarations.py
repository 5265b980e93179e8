"""Tool declarations: what a tool is, who may call it, and how its result may be shown.

A tool is data plus one code pointer (`execute`). Everything the executor decides is read from
the declaration, so the executor has no per-tool branches. Declarations are validated when they
are constructed: a bad tool fails when its adapter module is imported, not on the first request.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from gateway.canonical import canonical_json
from gateway.errors import ToolDeclarationError
from gateway.tools.preview import PreviewRead
from gateway.untrusted import has_untrusted_fields

if TYPE_CHECKING:
    from gateway.tools.context import ToolContext

__all__ = [
    "Access",
    "definition_hash",
    "is_key_field",
    "Approval",
    "Escalation",
    "Execute",
    "Lookup",
    "Mode",
    "NOT_APPLIED_STATUSES",
    "Preflight",
    "RESERVED_TOOL_PREFIX",
    "StatusLookup",
    "Tool",
    "WriteContract",
    "WriteStatus",
]

RESERVED_TOOL_PREFIX = "countersign_view_"
"""Names of the app-only tools a view of the gateway's MCP Apps calls (`gateway.executor.views.APP_TOOLS`): no
declared tool may take one, in any case, or it could stand in for a view's call."""

# SEP-986 allows these characters; we refuse what the SDK only warns about.
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
# Normalised field names that would let a caller choose the idempotency key (invariant 4).
_KEY_FIELD = re.compile(r"idempoten|dedup")
_NOT_LOWER = re.compile(r"[^a-z]")

Execute = Callable[[Any, "ToolContext"], Awaitable[Mapping[str, Any] | BaseModel]]
"""``async (arguments, ctx) -> raw result``; the executor validates the result against `output`."""

Preflight = Callable[[Any, "ToolContext"], Awaitable[None]]
"""``async (arguments, ctx) -> None``: checks a write's target is one this caller was shown, before
any card exists. Raises `UpstreamNotFoundError` (NOT_FOUND) otherwise; it never changes anything."""


def is_key_field(name: str) -> bool:
    """Whether an argument name would let a caller choose an idempotency key (any spelling)."""
    return bool(_KEY_FIELD.search(_NOT_LOWER.sub("", name.lower())))


def definition_hash(tool: Tool) -> str:
    """Content hash of everything a tool promises: name, description, mode, schemas, access, contract, and the
    endpoint a registered tool's requests go to.

    A card is bound to the hash it was proposed under; executing it against a changed definition
    is refused. The provenance declarations (`Tool.visible_fields`, `Tool.returns_private_data`) are
    left out: they shape what a card says when it is proposed, not what its write does, so declaring
    them does not strand the cards already open.
    """
    contract = tool.write_contract
    approval = tool.approval
    document = {
        "name": tool.name,
        "adapter": tool.adapter,
        "description": tool.description,
        "mode": tool.mode.value,
        "input": tool.arguments.model_json_schema(),
        "output": tool.output.model_json_schema(),
        "access": {"roles": sorted(tool.access.any_of_roles), "public": tool.access.is_public},
        "approval": None
        if approval is None
        else {
            "role": approval.approver_role,
            "required": approval.required,
            "escalations": [[e.field, e.above, e.required] for e in approval.escalations],
        },
        "contract": None
        if contract is None
        else {
            "dedupes_on_key": contract.dedupes_on_key,
            "key_retention_seconds": contract.key_retention_seconds,
            "reference_field": contract.reference_field,
            "not_applied": sorted(contract.not_applied_statuses),
            # Only when declared, so the definitions of tools that declare none keep their hashes.
            **({"applied": sorted(contract.applied_statuses)} if contract.applied_statuses else {}),
        },
        # Only when declared, so the definitions of tools whose backend the operator configures keep their hashes.
        **({"endpoint": tool.endpoint} if tool.endpoint is not None else {}),
    }
    return "sha256:" + hashlib.sha256(canonical_json(document).encode()).hexdigest()


class Mode(StrEnum):
    """Whether a tool only reads, or changes something outside the gateway."""

    READ = "read"
    WRITE = "write"


@dataclass(frozen=True, kw_only=True, slots=True)
class Access:
    """Who may see and call a tool. There is deliberately no default anywhere.

    Build it with `Access.public()` (any authenticated agent of an org the adapter is enabled
    for) or `Access.roles("staff", ...)` (any one of these roles). A tool cannot be declared
    without one, so forgetting access and deciding "public" look different in code.
    """

    any_of_roles: frozenset[str]
    """Roles of which the caller needs at least one. Empty only for public access."""
    is_public: bool
    """True when every authenticated agent may call the tool."""

    def __post_init__(self) -> None:
        if self.is_public and self.any_of_roles:
            raise ToolDeclarationError("public access cannot also list roles", code="invalid_access")
        if not self.is_public and not self.any_of_roles:
            raise ToolDeclarationError(
                "access names no role; write Access.public() if everyone may call it", code="invalid_access"
            )

    @classmethod
    def public(cls) -> Access:
        return cls(any_of_roles=frozenset(), is_public=True)

    @classmethod
    def roles(cls, *roles: str) -> Access:
        return cls(any_of_roles=frozenset(roles), is_public=False)


Lookup = Literal["status_lookup", "search_match", "state_match", "none"]
"""How a lookup read the backend: a status read by the write's key (``status_lookup``), a search read and a
match on the key the API stored (``search_match``), or a read of the write's target and a match of its state
against what the write asked for (``state_match``: a label present, an issue closed, a pull merged); ``none``
for a contract that declares no read can settle the write (a person does)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WriteStatus:
    """What a backend says about a write, looked up by its idempotency key or by the state it asked for."""

    state: Literal["applied", "refused", "unknown"]
    """``applied``: the write took effect; ``refused``: it definitively did not; ``unknown``: no record."""
    reference: str | None = None
    """The backend's identifier for the effect (booking id, refund id), when applied."""
    detail: Mapping[str, Any] = field(default_factory=dict)
    """The backend's answer, or what the lookup saw of it, kept as evidence for people (never the model)."""
    via: Lookup = "status_lookup"
    """Which kind of lookup answered: the card says how it was settled."""


StatusLookup = Callable[[str, "ToolContext"], Awaitable[WriteStatus]]
"""``async (idempotency_key, ctx) -> WriteStatus``."""

NOT_APPLIED_STATUSES = frozenset({400, 403, 404, 405, 409, 410, 412, 422})
"""The default refusal table (README, "Refusals"): answers by which an HTTP API says it did not do what it was
asked (malformed, forbidden, not found, method not allowed, conflict, gone, precondition failed,
unprocessable). A write that gets one on its first send is FAILED, never resent; a 429 and a 401 are "not
processed, send later" (`policies.outcome.classify`); anything else may have landed and is UNKNOWN."""

UNAUTHENTICATED = 401
"""The backend did not take the gateway's own credentials (an expired token, a signed identity it could not
verify yet): it processed nothing, and the gateway renews what it sends, so the write is sent again later
rather than FAILED for a person's approval the backend never judged."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WriteContract:
    """How a backend makes a write safe to retry and possible to look up.

    Required on every write tool: without it an uncertain outcome could only be resolved by a
    blind resend.
    """

    dedupes_on_key: bool
    """Whether the backend applies a request at most once per ``Idempotency-Key``."""
    key_retention_seconds: float
    """How long the backend remembers a key; past it a resend could apply twice."""
    status_lookup: StatusLookup
    """Looks the write up by its idempotency key."""
    reference_field: str
    """Output field holding the backend's identifier for the effect (``booking_id``, ``refund_id``)."""
    not_applied_statuses: frozenset[int] = NOT_APPLIED_STATUSES
    """HTTP statuses that mean the backend did not apply the write (a definitive refusal): the card ends FAILED
    and is never sent again. The default is the documented table, `NOT_APPLIED_STATUSES`."""
    applied_statuses: frozenset[int] = frozenset()
    """HTTP statuses that mean the write is already applied (an API whose 409 says "this external id exists"):
    the card ends SUCCEEDED, with the answer as its evidence. None by default."""
    settle_seconds: float = 2.0
    """How long after a send a status lookup may still miss a write that did land."""
    max_resends: int = 3
    """How many times an UNKNOWN write may be sent again with its key after status lookups find nothing
    (`policies.outcome.reconcile_step`); each resend waits twice as long as the one before, and past the
    cap a person reconciles the card. Correctness never rests on the backend's dedupe alone."""

    def __post_init__(self) -> None:
        if self.max_resends < 0:
            raise ToolDeclarationError("max_resends cannot be negative", code="invalid_contract")
        if self.key_retention_seconds <= 0:
            raise ToolDeclarationError("key_retention_seconds must be positive", code="invalid_contract")
        if any(500 <= status for status in self.not_applied_statuses):
            # A 5xx may have been applied before the error; it can never prove "not applied".
            raise ToolDeclarationError("a 5xx status cannot mean 'not applied'", code="invalid_contract")
        if any(not 400 <= status < 500 or status == 429 for status in self.applied_statuses):
            # A 5xx says nothing of what happened, and a 429 says the request was not processed.
            raise ToolDeclarationError("only a 4xx status other than 429 can mean 'applied'", code="invalid_contract")
        if both := sorted(self.applied_statuses & self.not_applied_statuses):
            raise ToolDeclarationError(f"statuses both applied and not applied: {both}", code="invalid_contract")


@dataclass(frozen=True, kw_only=True, slots=True)
class Escalation:
    """More approvers when a numeric argument is above a threshold (e.g. a large refund)."""

    field: str
    """Name of a numeric input field."""
    above: float
    """Strictly above this value, `required` approvers are needed."""
    required: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Approval:
    """Who must countersign a write, how many, and how long a card may wait."""

    approver_role: str = "approver"
    """Role an admin key needs to decide cards of this tool (in the requester's org)."""
    required: int = 1
    """Distinct approvers needed; one rejection vetoes."""
    escalations: tuple[Escalation, ...] = ()
    decide_within_seconds: float = 24 * 3600.0
    """A card not decided by then expires."""
    execute_within_seconds: float = 3600.0
    """An approved card not executed by then expires instead of running late."""

    def __post_init__(self) -> None:
        if self.required < 1 or any(e.required < 1 for e in self.escalations):
            raise ToolDeclarationError("an approval needs at least one approver", code="invalid_approval")
        if self.decide_within_seconds <= 0 or self.execute_within_seconds <= 0:
            raise ToolDeclarationError("approval windows must be positive", code="invalid_approval")


@dataclass(frozen=True, kw_only=True, slots=True)
class Tool:
    """One tool an adapter offers.

    Raises:
        ToolDeclarationError: at construction, for a bad name, an open input model, an input
            field that could carry an idempotency key, a write tool without a write contract, a
            human render without a model projection, a model projection without its output
            model (or the reverse), `destructive` on a tool that only reads, or an `emits_untrusted_text` flag that does
            not match the output model's `Untrusted` fields.
    """

    name: str
    """Unique tool name, prefixed by its adapter (``rooms_list``); SEP-986 characters only."""
    adapter: str
    """The adapter (backend) this tool belongs to; orgs are granted adapters."""
    description: str
    """What the tool does and when to use it; shown to the model."""
    mode: Mode
    """Read or write. Write tools never run on an agent's call; they become approval cards."""
    arguments: type[BaseModel]
    """Closed input model: the schema the agent sees and the validator the executor uses."""
    output: type[BaseModel]
    """Model the backend's answer is validated against before anything is shown."""
    access: Access
    """Who may see and call the tool. No default: see `Access`."""
    execute: Execute
    """The one code pointer: performs the call. Receives validated arguments."""
    model_view: Callable[[Any], Mapping[str, Any]] | None = None
    """Projection shown to the model. It receives the output with untrusted text already withheld."""
    human_view: Callable[[Any], str] | None = None
    """Render for people, from the raw output; may contain third-party text."""
    emits_untrusted_text: bool = False
    """Whether the output carries third-party text; must match the output's `Untrusted` fields."""
    write_contract: WriteContract | None = None
    """Required for write tools, refused on read tools."""
    approval: Approval | None = None
    """Required for write tools: who countersigns and within which windows."""
    summary: Callable[[Any], str] | None = None
    """Required for write tools: a one-line, server-rendered account of what the write will do.
    It must not quote the agent's free text (that goes in `agent_text_fields`)."""
    agent_text_fields: frozenset[str] = frozenset()
    """Input fields holding the agent's own words (a title, a reason), shown to approvers as untrusted."""
    visible_fields: frozenset[str] = frozenset()
    """For writes: input fields whose text other people will see once it runs (a booking title on the
    shared calendar, an expense note). Text in them after a read of private data is a possible data
    flow, which the card flags (`policies.provenance`)."""
    returns_private_data: bool = True
    """For reads: whether the output holds private data (a customer's order, someone's bookings). True
    unless declared, so a forgotten declaration over-reports a data flow rather than hiding one; a read
    of what anyone in the org may see (a room list) declares False."""
    preflight: Preflight | None = None
    """For write tools: checks the target was offered to this caller before a card is created."""
    refusal_words: Mapping[str, str] = field(default_factory=dict)
    """For write tools: the backend's refusal codes (``slot_taken``) and the gateway's words for each
    ("the slot was taken"), which the requester is told when its card fails. Only these words reach
    the model; a refusal code not listed here is reported by its stable code alone."""
    preview: PreviewRead | None = None
    """For write tools: reads what the write will change, for the card, the feasibility check at
    proposal and the precondition before sending (`gateway.tools.preview`). It runs in place of `preflight`
    (it checks the target too), so a tool declares one or the other."""
    timeout_seconds: float = 10.0
    """Deadline for one execution, after which the call answers UPSTREAM_TIMEOUT."""
    changes_cards: bool = False
    """True for built-in tools that change the caller's own approval cards (never a backend)."""
    title: str | None = None
    """Short human-readable name for clients that show one."""
    model_view_output: type[BaseModel] | None = None
    """The model `model_view`'s projection conforms to; required beside `model_view`. The catalog
    publishes its schema as the tool's ``outputSchema``, so what the model is promised is declared."""
    destructive: bool | None = None
    """For tools that change something (writes, `changes_cards`): True when the change may destroy or
    overwrite (a cancellation, a refund), False when it only adds (a booking). None means not
    declared: the catalog then leaves ``destructiveHint`` out, and clients assume the MCP default
    (destructive). Refused on tools that only read."""
    open_world: bool | None = None
    """True when the backend is outside the company (a third party's service), False when it is the
    company's own system or the gateway itself. None means not declared: ``openWorldHint`` is left
    out, and clients assume the MCP default (open world)."""
    endpoint: str | None = None
    """Where the tool's requests go, when an admin reviews that with the tool: a registered adapter's base URL.
    It is part of the definition (`definition_hash`), so a card is never sent, looked up or resent anywhere but
    where it was approved to go: an idempotency key means nothing to another host. None for a tool whose backend
    the operator configures."""

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ToolDeclarationError(f"invalid tool name {self.name!r}", code="invalid_name", tool=self.name)
        if not self.name.startswith(f"{self.adapter}_"):
            raise ToolDeclarationError(
                f"tool {self.name!r} must be prefixed with its adapter name {self.adapter!r}",
                code="invalid_name",
                tool=self.name,
            )
        if self.name.lower().startswith(RESERVED_TOOL_PREFIX):
            raise ToolDeclarationError(
                f"tool names starting with {RESERVED_TOOL_PREFIX} are reserved for the gateway's MCP Apps views",
                code="reserved_name",
                tool=self.name,
            )
        if self.arguments.model_config.get("extra") != "forbid":
            raise ToolDeclarationError(
                "input model must be closed (model_config extra='forbid')", code="open_input", tool=self.name
            )
        for field_name, info in self.arguments.model_fields.items():
            spellings = {
                field_name,
                info.alias or "",
                info.validation_alias if isinstance(info.validation_alias, str) else "",
            }
            if any(is_key_field(spelling) for spelling in spellings if spelling):
                raise ToolDeclarationError(
                    f"input field {field_name!r} would let the caller choose an idempotency key",
                    code="key_field",
                    tool=self.name,
                )
        if self.mode is Mode.WRITE and self.write_contract is None:
            raise ToolDeclarationError("a write tool needs a write contract", code="missing_contract", tool=self.name)
        if self.mode is Mode.WRITE and (self.approval is None or self.summary is None):
            raise ToolDeclarationError(
                "a write tool needs an approval policy and a summary", code="missing_approval", tool=self.name
            )
        if self.mode is Mode.READ and (self.approval, self.summary, self.preflight, self.preview) != (None,) * 4:
            raise ToolDeclarationError(
                "approval, summary, preflight and preview are for writes", code="stray_write", tool=self.name
            )
        if self.preflight is not None and self.preview is not None:
            raise ToolDeclarationError(
                "a preview checks the target itself; declare it without a preflight", code="stray_write", tool=self.name
            )
        stray = (self.agent_text_fields | self.visible_fields) - set(self.arguments.model_fields)
        if self.visible_fields and self.mode is Mode.READ:
            raise ToolDeclarationError("visible_fields are for writes", code="stray_write", tool=self.name)
        if stray:
            raise ToolDeclarationError(
                f"agent_text_fields or visible_fields not in the input: {sorted(stray)}", code="stray_field"
            )
        if self.approval is not None:
            numeric = {name for name, info in self.arguments.model_fields.items() if info.annotation in (int, float)}
            for escalation in self.approval.escalations:
                if escalation.field not in numeric:
                    raise ToolDeclarationError(
                        f"escalation field {escalation.field!r} is not a numeric input", code="invalid_approval"
                    )
        if self.mode is Mode.READ and self.write_contract is not None:
            raise ToolDeclarationError(
                "a read tool cannot have a write contract", code="stray_contract", tool=self.name
            )
        if (self.model_view is None) != (self.model_view_output is None):
            raise ToolDeclarationError(
                "a model projection and its output model come together", code="missing_projection", tool=self.name
            )
        if self.destructive is not None and self.mode is Mode.READ and not self.changes_cards:
            raise ToolDeclarationError(
                "destructive is for tools that change something", code="stray_write", tool=self.name
            )
        if self.human_view is not None and self.model_view is None:
            raise ToolDeclarationError(
                "a human render needs a model projection beside it", code="missing_projection", tool=self.name
            )
        if has_untrusted_fields(self.output) != self.emits_untrusted_text:
            raise ToolDeclarationError(
                "emits_untrusted_text must be True exactly when the output has Untrusted fields",
                code="untrusted_flag",
                tool=self.name,
            )
        if self.timeout_seconds <= 0:
            raise ToolDeclarationError("timeout_seconds must be positive", code="invalid_timeout", tool=self.name)

    @property
    def read_only(self) -> bool:
        return self.mode is Mode.READ
