"""The ledger's contract: what a card store must do, as the executor, card service and worker see it.

`Ledger` is the seam between the layers that decide (the executor's write path, the admin card
service, the worker) and the store that keeps cards (`gateway.store.ledger.redis_ledger.RedisLedger`). Every
transition is one atomic step that checks all its guards before its first write and answers with a
`Transition`: a `TransitionStatus` and the card as it is now. A transition retried with the same
transition id answers ``ALREADY_APPLIED`` and changes nothing.

Durability (ARCHITECTURE invariant 7): a transition's answer counts only once the store confirmed it
durable, in the same round trip as the transition (`gateway.store.durability`). When it cannot, the
answer is ``ERR_NOT_DURABLE``, whatever the script answered: the transition may be **applied but not
confirmed** (in the store's memory, perhaps never on disk). `Transition.applied` says what the
script answered and `Transition.card` is the card as it left it. Nobody may act on such an answer:
no card is acknowledged to an agent, no decision reported done to an admin, nothing is sent after an
unconfirmed claim or dispatch. The applied state may still stand once the store is durable again
(an approval then runs); callers say so to whoever they answer (``LEDGER_UNAVAILABLE``, retryable,
"check the card").

Which transitions exist, from which states to which, by whom and behind which guards, is written
once in `gateway.cards.transitions.TRANSITIONS`.
Methods raise `gateway.errors.StoreUnavailableError` when the store cannot be reached; callers fail
closed on it.

Every card the store saves is also announced as a `CardChange` to whoever subscribed to its
`CardChanges` (the live console), from whichever process saved it.

Listing is paged (`Ledger.page`): a `CardQuery` names one org and its filters, and each `CardPage`
carries an opaque cursor to the next page. Following the cursors visits every card of the org that
existed when the first page was read, once, newest first; filters are evaluated on each card as
its page is read, over all the org's cards, never over a window of the newest ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from gateway.cards.card import Card, CardEvent, CardState
from gateway.provenance import Provenance
from gateway.tools.preview import Preview

__all__ = [
    "CardChange",
    "CardChanges",
    "CardPage",
    "CardQuery",
    "DurabilityGuard",
    "Ledger",
    "OutboxEntry",
    "Proposal",
    "Transition",
    "ChangeSubscription",
    "TransitionStatus",
]


class TransitionStatus(StrEnum):
    """The answer of one transition."""

    OK = "OK"
    ALREADY_APPLIED = "ALREADY_APPLIED"
    """The same transition id was applied before; nothing changed this time."""
    EXISTING = "EXISTING"
    """A proposal matched a card with the same dedupe key, open or SUCCEEDED within its repeat window;
    that card is the answer."""
    NOT_DUE = "NOT_DUE"
    """A timer step found nothing to do yet."""
    ERR_NOT_FOUND = "ERR_NOT_FOUND"
    ERR_EXISTS = "ERR_EXISTS"
    ERR_STATE = "ERR_STATE"
    """The card's state does not allow this transition."""
    ERR_EXPIRED = "ERR_EXPIRED"
    """The card's deadline passed; it is EXPIRED now."""
    ERR_SELF_APPROVAL = "ERR_SELF_APPROVAL"
    ERR_STALE = "ERR_STALE"
    """The decision named a version or args_hash the card no longer has."""
    ERR_DUPLICATE_APPROVER = "ERR_DUPLICATE_APPROVER"
    ERR_FENCE = "ERR_FENCE"
    """A worker's fencing token is no longer the card's: another worker owns it."""
    ERR_LEASE = "ERR_LEASE"
    """The worker's lease ran out before it could dispatch."""
    ERR_ARGUMENT = "ERR_ARGUMENT"
    ERR_NOT_DURABLE = "ERR_NOT_DURABLE"
    """The store could not confirm the transition durable (AOF off, eviction on, fsync unconfirmed,
    configuration unverifiable). It may be applied all the same (`Transition.applied`): act on nothing."""
    ERR_QUOTA_EXCEEDED = "ERR_QUOTA_EXCEEDED"
    """The requester already has as many open cards as its cap allows; no card was made. `extra` holds
    ``limit`` (the cap) and ``open`` (the requester's open cards). To a policy approval: the requester's
    daily policy budget is spent (`extra`: ``limit``, ``spent``); the card waits for a person."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Proposal:
    """Everything a new card is made of; built by the executor, never by the caller."""

    tool: str
    tool_version: str
    arguments: Mapping[str, Any]
    args_hash: str
    requester_subject: str
    requester_org: str
    requester_key_id: str
    requester_roles: frozenset[str]
    approvals_required: int
    approver_role: str
    summary: str
    agent_text: Mapping[str, str]
    decide_within_ms: int
    execute_within_ms: int
    dedupe_key: str
    preview: Preview | None = None
    """The tool's preview as read for this proposal (None when it declares none); stored on the card."""
    acting_client: str = ""
    actors: tuple[str, ...] = ()
    awaits_policy: bool = False
    """A policy rule is asked about the card right after it is made (`gateway.executor.policy_approvals`):
    the notice that it waits for a person is given then, if it still does, not on its creation."""
    provenance: Provenance | None = None
    """What the requester read before proposing (`gateway.provenance`); stored on the card."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Transition:
    """The answer of one transition: a status and the card as it is now (None if it does not exist)."""

    status: TransitionStatus
    card: Card | None
    extra: Mapping[str, Any]
    applied: TransitionStatus | None = None
    """With ``ERR_NOT_DURABLE``: what the script answered, i.e. what may be applied though unconfirmed."""
    problems: tuple[str, ...] = ()
    """With ``ERR_NOT_DURABLE``: why the store is not durable, for operators."""

    @property
    def ok(self) -> bool:
        return self.status in (TransitionStatus.OK, TransitionStatus.ALREADY_APPLIED)

    @property
    def unconfirmed(self) -> bool:
        """Applied but not confirmed durable: the script changed the card, the store did not confirm it."""
        return self.status is TransitionStatus.ERR_NOT_DURABLE and self.applied in (
            TransitionStatus.OK,
            TransitionStatus.ALREADY_APPLIED,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class OutboxEntry:
    """One approved card waiting for a worker: the stream it was read from, its entry id, the card."""

    stream: str
    entry_id: str
    card_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class CardQuery:
    """Which cards of one org a listing wants: those matching every filter that is given."""

    org: str
    state: CardState | None = None
    tool: str | None = None
    requester: str | None = None
    """The requesting agent's subject, within `org`."""

    def matches(self, card: Card) -> bool:
        return (
            card.requester_org == self.org
            and (self.state is None or card.state is self.state)
            and (self.tool is None or card.tool == self.tool)
            and (self.requester is None or card.requester_subject == self.requester)
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class CardPage:
    """One page of a listing, newest first, and where the next one starts.

    A page may hold fewer cards than asked for, even none, and still have a `next_cursor`: each
    page examines a bounded number of cards. Only a `next_cursor` of None means "no more".
    """

    cards: Sequence[Card]
    next_cursor: str | None
    """Opaque; pass it back unchanged for the next page. It holds positions only and grants nothing."""


class Ledger(Protocol):
    """Cards and their state machine. See the module docstring for the contract every method keeps."""

    # -- creating and deciding (the executor, the card service) ------------------------------------

    async def propose(self, proposal: Proposal) -> Transition:
        """Create a PENDING card with a freshly minted idempotency key, or answer ``EXISTING`` with
        the open card of the same dedupe key (scoped to the requester), or, when the requester already
        holds its cap of open cards (`gateway.limits.budgets.Limits.open_cards`), refuse with
        ``ERR_QUOTA_EXCEEDED`` and make nothing. The dedupe comes first: an identical proposal is
        answered with its open card even at the cap."""
        ...

    async def repeated(self, org: str, subject: str, dedupe_key: str) -> Card | None:
        """The SUCCEEDED card that a proposal of `dedupe_key` by (`org`, `subject`) would be answered with
        now (``EXISTING``: within its repeat window), or None. Reads only: for a proposal that is not filed
        (its preview found it infeasible, as the very write it repeats made it)."""
        ...

    async def approve(
        self, card_id: str, *, approver: str, version: int, args_hash: str, comment: str, identity: str = ""
    ) -> Transition:
        """Record `approver`'s approval. `identity` is who the approver is (`gateway.principal.identity_of`;
        empty: `approver` as written): a quorum counts distinct identities, so one person under two
        spellings of their subject approves once."""
        ...

    async def approve_by_policy(
        self,
        card_id: str,
        *,
        rule: str,
        requester: tuple[str, str],
        version: int,
        args_hash: str,
        day: str,
        budget: int,
    ) -> Transition:
        """`approve` by the approver ``policy:<rule>``: the same transition and event as a person's, and
        also refused when a policy already approved the card (``ERR_DUPLICATE_APPROVER``: a policy is one
        approver at most) or when `requester` (the card's org and subject) had `budget` policy approvals
        on UTC `day` (``YYYYMMDD``) already (``ERR_QUOTA_EXCEEDED``, `extra`: ``limit``, ``spent``)."""
        ...

    async def reject(
        self, card_id: str, *, admin: str, reason: str, version: int | None = None, args_hash: str | None = None
    ) -> Transition:
        """Veto a PENDING card; given `version` and `args_hash`, only if the card still has both (else ERR_STALE)."""

    async def cancel(self, card_id: str, *, actor: str) -> Transition: ...

    async def resolve(self, card_id: str, *, admin: str, outcome: str, evidence: Mapping[str, Any]) -> Transition: ...

    # -- executing (the worker and the executor's write path) --------------------------------------

    async def claim(self, card_id: str, *, worker: str, lease_ms: int) -> Transition: ...

    async def claim_resend(self, card_id: str, *, worker: str, lease_ms: int, max_resends: int) -> Transition:
        """Claim an UNKNOWN card to send it again with its key. Past execute_by (``ERR_EXPIRED``), or once it was
        resent `max_resends` times (``ERR_QUOTA_EXCEEDED``, the write contract's cap), it is handed to a person
        (NEEDS_RECONCILIATION) instead."""
        ...

    async def dispatch(self, card_id: str, *, fence: int) -> Transition:
        """Record DISPATCHED, durably, before anything is sent (``ERR_NOT_DURABLE``: send nothing)."""
        ...

    async def complete(
        self,
        card_id: str,
        *,
        fence: int,
        outcome: CardState,
        reference: str,
        evidence: Mapping[str, Any],
        settle_ms: int,
    ) -> Transition: ...

    async def release(self, card_id: str, *, fence: int, reason: str, requeue_ms: int) -> Transition: ...

    async def recover(self, card_id: str) -> Transition: ...

    async def reconcile(
        self, card_id: str, *, result: str, reference: str, evidence: Mapping[str, Any], next_at_ms: int = 0
    ) -> Transition: ...

    async def sweep_open(self, card_id: str, *, requeue_ms: int) -> Transition: ...

    # -- reading ------------------------------------------------------------------------------------

    async def get(self, card_id: str) -> Card | None: ...

    async def events(self, card_id: str) -> Sequence[CardEvent]: ...

    async def recent(
        self, *, limit: int = 200, org: str | None = None, requester: tuple[str, str] | None = None
    ) -> Sequence[Card]:
        """The newest cards, newest first: of everyone, of one `org`, or of one `(org, subject)`."""
        ...

    async def page(self, query: CardQuery, *, limit: int, cursor: str | None = None) -> CardPage:
        """At most `limit` cards matching `query`, newest first, after `cursor` (None: from the newest).

        Raises:
            InvalidCursorError: `cursor` is not one this ledger issued.
        """
        ...

    async def due(self, *, now_ms: int, limit: int = 100, from_ms: int = 0) -> Sequence[str]:
        """Cards whose timer (expiry, requeue, lease, reconcile) is due by `now_ms`: those not due before
        `from_ms`, the soonest first, at most `limit` per shard."""
        ...

    async def server_time_ms(self) -> int:
        """The store's clock: every deadline is measured against it, never a process's clock."""
        ...

    # -- the outbox ---------------------------------------------------------------------------------

    async def ensure_outbox_group(self) -> None: ...

    def outbox_shards(self) -> Sequence[int]:
        """The outbox's shards: one stream each, in one Cluster slot each, and one reader each."""
        ...

    async def read_outbox(
        self, consumer: str, *, block_ms: int, count: int = 16, shard: int | None = None
    ) -> Sequence[OutboxEntry]:
        """New entries for `consumer`: from `shard`'s stream, waiting up to `block_ms` for the first; or,
        without a shard, from every stream once, without waiting."""
        ...

    async def ack(self, entry: OutboxEntry) -> None: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class CardChange:
    """A card the ledger saved: which, of which org, and its state and version right after."""

    card_id: str
    org: str
    state: str
    version: int


class ChangeSubscription(Protocol):
    """Changes announced since subscribing, in the order they were announced."""

    async def next_change(self, timeout: float) -> CardChange | None:
        """The next change, or None when none came within `timeout` seconds.

        Raises:
            StoreUnavailableError: the store stopped answering; changes may have been missed.
        """
        ...


class CardChanges(Protocol):
    """Every card any process saves, as it is saved (`gateway.store.ledger.changes.RedisCardChanges`).

    Nothing is kept for a subscriber that is not listening: whoever subscribes reads the cards' current
    state after subscribing, then follows the changes."""

    def subscribe(self) -> AbstractAsyncContextManager[ChangeSubscription]: ...


class DurabilityGuard(Protocol):
    """Fail closed: "may a write go through the ledger now?" (`gateway.store.durability.LedgerGuard`)."""

    async def writable(self) -> bool:
        """True only while the ledger is reachable and keeps every acknowledged write.

        A cached pre-check, so a refused write changes nothing; each transition is still confirmed
        durable on its own (``ERR_NOT_DURABLE``)."""
        ...

    def invalidate(self) -> None:
        """Forget the verdict after a store failure, so the next call checks again."""
        ...
