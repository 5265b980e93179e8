"""Approval cards: what an agent's write proposal becomes, and the states it moves through.

```text
PENDING -> APPROVED -> EXECUTING -> SUCCEEDED | FAILED | UNKNOWN
UNKNOWN -> (status query) -> SUCCEEDED | FAILED | NEEDS_RECONCILIATION -> (admin) SUCCEEDED | FAILED
UNKNOWN -> (status query: key never seen) -> EXECUTING   (resent with the same key, before execute_by)
UNKNOWN | EXECUTING a resend -> (execute_by passed) -> NEEDS_RECONCILIATION   (never a late send)
PENDING -> REJECTED | CANCELLED | EXPIRED;  APPROVED -> CANCELLED | EXPIRED
EXECUTING (never sent: released, or lease lost) -> APPROVED, or EXPIRED once past execute_by
EXECUTING (never sent, execute_by passed at dispatch) -> EXPIRED   (never a late send)
EXECUTING (sent, lease lost; or a resend, sent or not) -> UNKNOWN
```

Some steps change a card but not its state: an approval below quorum (PENDING), a requeue
(APPROVED), the dispatch record (EXECUTING), a status query that finds nothing settled yet
(UNKNOWN), and a late worker result, which is recorded in whatever state the card is in.

Every transition is one atomic script in the ledger, and the table `gateway.cards.transitions.TRANSITIONS`
is this diagram as data; this module is only the vocabulary.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from gateway.canonical import canonical_json
from gateway.tools.preview import Preview

if TYPE_CHECKING:  # at run time a card only holds one: the store's row parser builds it
    from gateway.provenance import Provenance

__all__ = [
    "COMPACTED",
    "OPEN",
    "TERMINAL",
    "Card",
    "CardDecision",
    "CardEvent",
    "CardOutcome",
    "CardState",
    "args_hash",
    "decision_of",
    "intact",
    "outcome_of",
    "verify_chain",
]


class CardState(StrEnum):
    PENDING = "PENDING"
    APPROVED = "APPROVED"
    EXECUTING = "EXECUTING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"
    NEEDS_RECONCILIATION = "NEEDS_RECONCILIATION"
    REJECTED = "REJECTED"
    CANCELLED = "CANCELLED"
    EXPIRED = "EXPIRED"


TERMINAL = frozenset(
    {CardState.SUCCEEDED, CardState.FAILED, CardState.REJECTED, CardState.CANCELLED, CardState.EXPIRED}
)
"""States no transition starts from, so a card in one never changes state again (a late worker
result is still recorded on it). Checked against the transition table by tests/cards/test_transitions.py."""

OPEN = frozenset({CardState.PENDING, CardState.APPROVED})
"""States in which a card still waits for a person or a worker: the states `cancel` starts from."""

CardDecision = Literal["pending", "approved", "rejected", "expired", "cancelled"]
CardOutcome = Literal["none", "in_progress", "succeeded", "failed", "unknown"]


def decision_of(state: CardState) -> CardDecision:
    """The human decision, shown apart from the outcome: pending/approved/rejected/expired/cancelled."""
    if state is CardState.PENDING:
        return "pending"
    if state is CardState.REJECTED:
        return "rejected"
    if state is CardState.CANCELLED:
        return "cancelled"
    if state is CardState.EXPIRED:
        return "expired"
    return "approved"


def outcome_of(state: CardState) -> CardOutcome:
    """What came of the write: none/succeeded/failed/unknown (unknown also while a person must resolve)."""
    if state is CardState.SUCCEEDED:
        return "succeeded"
    if state is CardState.FAILED:
        return "failed"
    if state in (CardState.UNKNOWN, CardState.NEEDS_RECONCILIATION):
        return "unknown"
    if state is CardState.EXECUTING:
        return "in_progress"
    return "none"


COMPACTED = "compacted"
"""The type of the event that stands in for the middle of a long history (see `verify_chain`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CardEvent:
    """One entry of a card's hash-chained history.

    A history is bounded (`gateway.store.ledger.scripts`): back-to-back repeats of a housekeeping
    step are counted on one event (`repeats`, `last_at_ms`), and past its bound the middle of the
    history is replaced by one `COMPACTED` event whose data names the last event it replaced
    (``through``, ``through_hash``) and counts the steps it replaced by type (``steps``).
    """

    seq: int
    type: str
    actor: str
    state: str
    version: int
    at_ms: int
    data: Mapping[str, Any] = field(default_factory=dict)
    data_raw: str = "{}"
    """`data` exactly as stored and hashed."""
    prev: str = ""
    hash: str = ""
    repeats: int = 0
    """How many more times the same step (same type, actor, state and data) happened right after this
    one. Bookkeeping outside the hashed material: the chain proves the first time, at `at_ms`."""
    last_at_ms: int | None = None
    """When the last of those repeats happened."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Card:
    """A card as stored. `arguments` are canonical; `agent_text` holds the agent's own words."""

    card_id: str
    tool: str
    tool_version: str
    arguments: Mapping[str, Any]
    args_hash: str
    requester_subject: str
    requester_org: str
    requester_key_id: str
    state: CardState
    version: int
    idempotency_key: str
    transaction_id: str
    approvals_required: int
    approvers: tuple[str, ...]
    summary: str
    agent_text: Mapping[str, str]
    created_ms: int
    decide_by_ms: int
    execute_by_ms: int | None = None
    execute_within_ms: int = 0
    """How long an approved card may wait to run (execute_by is approval time plus this); 0 when unknown."""
    fence: int = 0
    dispatched: bool = False
    attempts: int = 0
    dispatched_ms: int | None = None
    """When the latest send was recorded (DISPATCHED), by the Redis clock."""
    first_dispatched_ms: int | None = None
    """When the first send was recorded: from then on the backend may know the key."""
    approved_ms: int | None = None
    """When the approval quorum was reached (APPROVED), by the Redis clock; None while undecided."""
    resend: bool = False
    """Claimed again after an UNKNOWN outcome: the key may already have reached the backend, so the
    card never goes back to APPROVED or EXPIRED, and a refusal of its send proves nothing."""
    reference: str | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    rejection: Mapping[str, str] = field(default_factory=dict)
    """``{"by": admin subject, "reason": ...}`` when rejected."""
    approver_role: str = "approver"
    requester_roles: frozenset[str] = frozenset()
    """The requester's roles when the card was made (access is re-checked against the live key)."""
    preview: Preview | None = None
    """What the write will change, as its backend answered when it was proposed (None: the tool
    declares no preview). For people: never part of the agent's view."""
    acting_client: str = ""
    """The agent (client) that proposed the card for `requester_subject`, when a token said so."""
    actors: tuple[str, ...] = ()
    """The delegation chain the proposing token carried (RFC 8693 ``act``), nearest first. The person
    is `requester_subject`; neither they nor any actor may approve the card."""
    provenance: Provenance | None = None
    """What the requester read before proposing it, and what that means for approvers
    (`gateway.provenance`); None for a card stored before provenance was recorded."""

    @property
    def decision(self) -> CardDecision:
        return decision_of(self.state)

    @property
    def outcome(self) -> CardOutcome:
        return outcome_of(self.state)


def args_hash(tool: str, version: str, canonical: Mapping[str, Any]) -> str:
    """SHA-256 over tool, tool version and the canonical arguments: what an approval is bound to."""
    return hashlib.sha256(f"{tool}\n{version}\n{canonical_json(canonical)}".encode()).hexdigest()


def intact(card: Card, events: Sequence[CardEvent]) -> bool:
    """Whether `card` is the one its history made: the events form an unbroken chain (`verify_chain`), the
    ``created`` event names the card's tool and args hash, and the stored arguments still hash to it.

    The chain alone does not cover the card's own fields: arguments changed in the stored card leave every
    event intact, and the worker refuses such a card when it runs (the hash no longer matches). What a
    person reads as "history intact" must say so as well.
    """
    if not verify_chain(events):
        return False
    created = next((event for event in events if event.type == "created"), None)
    if created is not None and (created.data.get("tool"), created.data.get("args_hash")) != (card.tool, card.args_hash):
        return False
    return args_hash(card.tool, card.tool_version, card.arguments) == card.args_hash


def verify_chain(events: Sequence[CardEvent]) -> bool:
    """Whether a card's events form an unbroken hash chain, numbered from 1 with no gap.

    Each event's hash covers the previous event's hash, its own number, type, actor, state, version,
    time and data (not `CardEvent.repeats`). A `COMPACTED` event is checked like any other, and stands
    for the events numbered up to its ``through``: the event after it must be numbered
    ``through`` + 1 and link to ``through_hash``. What it replaced is gone and cannot be checked.
    """
    previous, expected = "", 1
    for event in events:
        parts = [previous, str(event.seq), event.type, event.actor, event.state, str(event.version), str(event.at_ms)]
        digest = hashlib.sha1("|".join([*parts, event.data_raw]).encode()).hexdigest()
        if event.seq != expected or event.prev != previous or digest != event.hash:
            return False
        if event.type == COMPACTED:
            through, through_hash = event.data.get("through"), event.data.get("through_hash")
            if not isinstance(through, int) or through < event.seq or not isinstance(through_hash, str):
                return False
            previous, expected = through_hash, through + 1
        else:
            previous, expected = event.hash, expected + 1
    return True
