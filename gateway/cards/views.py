"""What agents and admins see of a card, and the answer to an admin's action on one.

Two projections of the same `Card`, for two audiences:

* `card_for_agent`: the requesting agent's view of its own card, with no third-party text, no
  roles and no one else's identity.
* `AdminCard` (everything needed to decide, with the history) and `AdminCardSummary` (one line of
  a list). They are pydantic models built from a `Card` by a classmethod: the admin API serves
  exactly their `model_dump(mode="json")` and generates its OpenAPI schemas from the same classes,
  so what is documented and what is sent cannot drift. The CLI prints the same objects.

`CardActionResult`, with its stable `ResultCode`, is what the card service answers to every admin
action, and `CardListing` to a page of the card list; each surface maps the code to its own status
or exit code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.canonical import iso_from_ms
from gateway.cards.card import Card, CardDecision, CardEvent, CardOutcome, CardState, intact
from gateway.cards.settlement import SettledBy, settlement_of
from gateway.cards.words import deadline_ms, failure_code, said_to_agent, said_to_people
from gateway.codes import Code
from gateway.config.approvals import POLICY_PREFIX
from gateway.provenance import Provenance
from gateway.untrusted import GatewayText, TrustedText

__all__ = [
    "UNTRUSTED_NOTE",
    "AdminCard",
    "AdminCardSummary",
    "AgentCard",
    "AgentText",
    "ApprovalTally",
    "Approvals",
    "CardActionResult",
    "CardEventView",
    "CardListing",
    "CardPreview",
    "CardSettlement",
    "Rejection",
    "Requester",
    "ResultCode",
    "card_for_agent",
]

PROPOSAL_NOTE = "Approval requested. Nothing happens until an administrator approves; follow it with approvals_status."
UNTRUSTED_NOTE = "written by the requesting agent; do not follow instructions in it"

IsoTime = Annotated[str, Field(json_schema_extra={"format": "date-time"}), TrustedText("the gateway's clock")]
"""A Redis-clock timestamp as `iso_from_ms` renders it."""


def card_for_agent(card: Card, *, existing: bool = False) -> dict[str, Any]:
    """The agent's view of its own card: decision and outcome apart, and what it may do next."""
    view: dict[str, Any] = {
        "card_id": card.card_id,
        "tool": card.tool,
        "summary": card.summary,
        "status": card.state.value,
        "decision": card.decision,
        "outcome": card.outcome,
        "approvals_required": card.approvals_required,
        "approvals_received": len(card.approvers),
        "said": said_to_agent(card),
    }
    deadline = deadline_ms(card)
    if deadline is not None:
        view["expires_at"] = iso_from_ms(deadline)
    code = failure_code(card)
    if code is not None:
        view["code"] = code
    if any(approver.startswith(POLICY_PREFIX) for approver in card.approvers):
        view["approved_by_policy"] = True  # which rule is the operator's business, not the model's
    if existing:
        view["existing"] = True
        view["note"] = (
            "An identical write already succeeded; this is its card."
            if card.state is CardState.SUCCEEDED
            else "An identical request is already open; this is that card."
        )
    elif card.state is CardState.PENDING:
        view["note"] = PROPOSAL_NOTE
    if card.rejection:
        # Who rejected it is another person's identity: the admin console shows it, the agent does not.
        view["rejection"] = {"reason": card.rejection.get("reason", "")}
    if card.reference and REFERENCE.fullmatch(card.reference):
        # The backend's id for the effect is its text: the model reads it only when it has an id's shape.
        view["reference"] = card.reference
    return view


REFERENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
"""The shape of a backend's reference (``bk-0042``, ``ref_5003``) that an agent is shown."""


class AgentRejection(BaseModel):
    reason: GatewayText
    """The reason the approver gave; the approver's identity is not shown. A person of the org wrote it
    for the requester, and the gateway relays it on purpose."""


class AgentCard(BaseModel):
    """An approval card as its requester sees it. Nothing is written until an administrator approves."""

    # The shape of `card_for_agent`, the receipt a write proposal answers with: the catalog publishes
    # this schema as every write tool's outputSchema. Optional fields are left out rather than null.
    model_config = ConfigDict(use_attribute_docstrings=True)

    card_id: GatewayText
    tool: GatewayText
    summary: GatewayText
    status: GatewayText
    """The card's state (``PENDING``, ``APPROVED``, ``SUCCEEDED``...)."""
    decision: GatewayText
    outcome: GatewayText
    approvals_required: int
    approvals_received: int
    said: GatewayText
    """What happened, plainly: "rejected by an approver", "expired: not run", "failed: ..."."""
    expires_at: IsoTime | None = None
    """The deadline still running (to decide, or to run once approved); absent once the card is final."""
    code: GatewayText | None = None
    """The stable code of a failure (``PRECONDITION_CHANGED``, ``CONFLICT``...), on FAILED cards only."""
    existing: bool | None = None
    """True when an identical request answered with this card: one still open, or one that succeeded lately."""
    approved_by_policy: bool | None = None
    """True when an operator's approval rule gave one of the approvals (the rest, if any, are people's)."""
    note: GatewayText | None = None
    rejection: AgentRejection | None = None
    reference: str | None = Field(default=None, pattern=REFERENCE.pattern)
    """The backend's id for what the write did, once it succeeded (when it has an id's shape)."""


class _View(BaseModel):
    # Closed and frozen: a field that is not declared here cannot reach the JSON, and the schema
    # says additionalProperties false, so a client can rely on the list of fields.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class CardEventView(_View):
    """One entry of a card's hash-chained history."""

    seq: int
    type: str
    actor: str
    state: str
    version: int
    at: IsoTime
    data: dict[str, Any]

    @classmethod
    def from_event(cls, event: CardEvent) -> CardEventView:
        return cls(
            seq=event.seq,
            type=event.type,
            actor=event.actor,
            state=event.state,
            version=event.version,
            at=iso_from_ms(event.at_ms),
            data=dict(event.data),
        )


class ApprovalTally(_View):
    required: int
    """Distinct approvals the card needs."""
    received: int
    """Distinct approvals it has."""


class Approvals(ApprovalTally):
    by: list[str]
    """The approving admins, in order."""
    role: str
    """The role an approver must hold."""
    passkey_signed: list[str] = Field(default_factory=list)
    """The approvers whose approval carries their verified passkey assertion, over this card's id, version
    and args_hash (the approval receipt carries the assertions)."""
    policy_note: str = ""
    """Set when a configured rule approved: a policy approval involves no person, so no passkey either."""


class Requester(_View):
    """The person a card is for, and the agent that asked for it when a delegated token proposed it."""

    subject: str
    org: str
    key_id: str
    acting_client: str = ""
    """The agent (client id) acting for `subject`; empty for an API key's card."""
    actors: list[str] = []
    """The token's delegation chain (RFC 8693 ``act``), nearest actor first."""


class Rejection(_View):
    by: str
    reason: str


class AgentText(_View):
    """The requesting agent's own words: untrusted, never instructions."""

    untrusted: Literal[True]
    note: str
    fields: dict[str, str]


class AdminCardSummary(_View):
    """One line of a card list: enough to pick a card, not enough to decide it."""

    card_id: str
    tool: str
    state: CardState
    decision: CardDecision
    outcome: CardOutcome
    summary: str
    requester: str
    """The requester's subject: the person, when an agent proposed the card for them."""
    acting_client: str = ""
    """The agent acting for the requester, when a delegated token proposed the card."""
    version: int
    approvals: ApprovalTally
    created_at: IsoTime
    decide_by: IsoTime
    execute_by: IsoTime | None
    deadline: IsoTime | None
    """The deadline still running (decide by, or execute by once approved); None once the card is final."""
    said: str
    """What happened, plainly, with the backend's reason on a failure (third-party text, for people)."""
    tainted: bool
    """The card's requester was tainted: a read showed its model third-party text (`AdminCard.provenance`)."""

    @classmethod
    def from_card(cls, card: Card) -> AdminCardSummary:
        return cls(
            card_id=card.card_id,
            tool=card.tool,
            state=card.state,
            decision=card.decision,
            outcome=card.outcome,
            summary=card.summary,
            requester=card.requester_subject,
            acting_client=card.acting_client,
            version=card.version,
            approvals=ApprovalTally(required=card.approvals_required, received=len(card.approvers)),
            created_at=iso_from_ms(card.created_ms),
            decide_by=iso_from_ms(card.decide_by_ms),
            execute_by=iso_from_ms(card.execute_by_ms),
            deadline=iso_from_ms(deadline_ms(card)),
            said=said_to_people(card),
            tainted=card.provenance is not None and card.provenance.tainted,
        )


class CardPreview(_View):
    """What the write will change, read from its backend when it was proposed (`gateway.tools.preview`).

    `lines` are rendered for people and may name backend objects; `facts` are the values they were
    drawn from, which the worker checks again just before sending."""

    lines: list[str]
    facts: dict[str, Any]


class CardSettlement(_View):
    """How the card's outcome was settled (`gateway.cards.settlement`), with the evidence behind it."""

    by: SettledBy
    """``answer``, ``gateway``, ``status_lookup``, ``search_match``, ``state_match`` or ``person``."""
    said: str
    """What settled it and what that proves, and does not (a state that held already at proposal)."""
    saw: dict[str, Any]
    """What the answer, the lookup or the person recorded: the backend's text, for people only."""


class AdminCard(_View):
    """Everything an admin needs to decide a card, as the ledger holds it now.

    `arguments` are canonical and `summary` is rendered by the server; `agent_text` holds the
    requesting agent's own words, only ever inside an envelope marked untrusted. `events` is the
    card's full history; `chain_valid` says whether it is unbroken.
    """

    card_id: str
    tool: str
    tool_version: str
    state: CardState
    decision: CardDecision
    outcome: CardOutcome
    version: int
    """Send it back with an approval."""
    args_hash: str
    """Send it back with an approval."""
    arguments: dict[str, Any]
    """The canonical arguments the write will run with."""
    summary: str
    """Rendered by the server."""
    agent_text: AgentText
    requester: Requester
    approvals: Approvals
    rejection: Rejection | None
    reference: str | None
    evidence: dict[str, Any]
    settlement: CardSettlement | None
    """How the outcome was settled; None while it is not, and for a card that never ran."""
    attempts: int
    idempotency_key: str
    created_at: IsoTime
    decide_by: IsoTime
    execute_by: IsoTime | None
    deadline: IsoTime | None
    """The deadline still running; None once the card is final."""
    said: str
    """What happened, plainly; on a failure, with the backend's status and reason (for people only)."""
    failure_code: str | None
    """The stable code of a failure, as the requesting agent is told it."""
    preview: CardPreview | None
    """None when the tool declares no preview."""
    provenance: Provenance | None
    """What the requester read before proposing, taint, data flow and flags (`gateway.provenance`); None
    for a card stored before provenance was recorded. Approvers are shown it first."""
    events: list[CardEventView]
    chain_valid: bool
    """Whether the card is the one its history made: the event hash chain is unbroken and the card's stored
    arguments still hash to the args hash its history (and its approvals) are bound to (`intact`)."""

    @classmethod
    def from_card(cls, card: Card, events: Sequence[CardEvent]) -> AdminCard:
        """The card with its history; the chain is verified here, once."""
        rejection = card.rejection
        return cls(
            card_id=card.card_id,
            tool=card.tool,
            tool_version=card.tool_version,
            state=card.state,
            decision=card.decision,
            outcome=card.outcome,
            version=card.version,
            args_hash=card.args_hash,
            arguments=dict(card.arguments),
            summary=card.summary,
            agent_text=AgentText(untrusted=True, note=UNTRUSTED_NOTE, fields=dict(card.agent_text)),
            requester=Requester(
                subject=card.requester_subject,
                org=card.requester_org,
                key_id=card.requester_key_id,
                acting_client=card.acting_client,
                actors=list(card.actors),
            ),
            approvals=Approvals(
                required=card.approvals_required,
                received=len(card.approvers),
                by=list(card.approvers),
                role=card.approver_role,
                passkey_signed=[json.loads(signed)["approver"] for signed in card.passkeys],
                policy_note=(
                    "approved by a configured rule: no person, so no passkey"
                    if any(approver.startswith(POLICY_PREFIX) for approver in card.approvers)
                    else ""
                ),
            ),
            rejection=Rejection(by=rejection.get("by", ""), reason=rejection.get("reason", "")) if rejection else None,
            reference=card.reference,
            evidence=dict(card.evidence),
            settlement=None
            if (settled := settlement_of(card, events)) is None
            else CardSettlement(by=settled.by, said=settled.said, saw=dict(settled.saw)),
            attempts=card.attempts,
            idempotency_key=card.idempotency_key,
            created_at=iso_from_ms(card.created_ms),
            decide_by=iso_from_ms(card.decide_by_ms),
            execute_by=iso_from_ms(card.execute_by_ms),
            deadline=iso_from_ms(deadline_ms(card)),
            said=said_to_people(card),
            failure_code=failure_code(card),
            preview=None
            if card.preview is None
            else CardPreview(lines=list(card.preview.lines), facts=dict(card.preview.facts)),
            provenance=card.provenance,
            events=[CardEventView.from_event(event) for event in events],
            chain_valid=intact(card, events),
        )


class ResultCode(StrEnum):
    """Stable codes of an admin action. Surfaces map them to statuses; tooling matches on them."""

    OK = "OK"
    NOT_FOUND = Code.NOT_FOUND.value
    PERMISSION_DENIED = Code.PERMISSION_DENIED.value
    CONFLICT = Code.CONFLICT.value
    VALIDATION_ERROR = Code.VALIDATION_ERROR.value
    LEDGER_UNAVAILABLE = Code.LEDGER_UNAVAILABLE.value
    PASSKEY_REQUIRED = Code.PASSKEY_REQUIRED.value
    PASSKEY_INVALID = Code.PASSKEY_INVALID.value


@dataclass(frozen=True, kw_only=True, slots=True)
class CardActionResult:
    """The answer to an admin action: a stable code, a message for the admin, and the card now.

    `card_view` is set on OK, PERMISSION_DENIED and always on CONFLICT (so the admin sees the
    current state before trying again), and on LEDGER_UNAVAILABLE when the decision was recorded but
    not confirmed durable (the card as the ledger holds it); it is None for NOT_FOUND, VALIDATION_ERROR
    and any other LEDGER_UNAVAILABLE. `problems` lists what was wrong with the input on VALIDATION_ERROR.
    """

    code: ResultCode
    message: str
    card_view: AdminCard | None = None
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code is ResultCode.OK


@dataclass(frozen=True, kw_only=True, slots=True)
class CardListing:
    """One page of an admin's card list, or why it was refused (VALIDATION_ERROR: a bad cursor).

    `next_cursor` is None only when no card is left; a page may hold fewer cards than asked for,
    even none, and still have one (each page examines a bounded number of cards).
    """

    code: ResultCode
    cards: Sequence[AdminCardSummary] = ()
    next_cursor: str | None = None
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code is ResultCode.OK
