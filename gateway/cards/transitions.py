"""The card state machine, written once as data: each transition, from where, to where, by whom, guarded how.

One row per ledger script. A row's `name` is the script's name in
`gateway.store.ledger.scripts.SCRIPTS`, the `RedisLedger` method that runs it and, for a transition
an admin causes, the last segment of its admin API route (``/admin/api/cards/{card_id}/{name}``).
``tests/cards/test_transitions.py`` runs every script from every state against a real Redis and holds it
to this table, and checks that the scripts, the methods and the routes match the rows, so none of
them can change alone. The diagram in `gateway.cards.card` is this table drawn.

How to read a row:

* `sources`: the states it may start from. Started from any other state it is refused by its
  `wrong_state` guard.
* `targets`: the states an applied run may leave the card in. A target that is also a source is a
  step that changes the card (version, history) but not its state: an approval below quorum, a
  requeue, a dispatch, a status check. (A requeue or a status check that repeats the card's last
  event is counted on that event rather than appended: `gateway.store.ledger.scripts`.)
* `guards`: what must hold, in the order the script checks them, each with the status it refuses
  with and what a refusal still leaves behind (`Aftermath`). Most refusals leave the card exactly as
  it was; a passed deadline expires the card (approve, reject, cancel and claim then answer
  ``ERR_EXPIRED``), a resend past execute_by hands the card to a person, and a late worker result is
  recorded.

Before any guard, every script answers ``ALREADY_APPLIED`` to a transition id it applied before,
and every script but `propose` answers ``ERR_NOT_FOUND`` for a card that does not exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from gateway.cards.card import CardState
from gateway.cards.contract import TransitionStatus

__all__ = [
    "DEADLINE_NOT_PASSED",
    "EXECUTING_UNDER_THIS_FENCE",
    "FENCE_MATCHES",
    "IN_A_SOURCE_STATE",
    "LEASE_EXPIRED",
    "LEASE_NOT_EXPIRED",
    "NOT_ALREADY_AN_APPROVER",
    "NOT_A_LATE_RESULT",
    "NOT_THE_REQUESTER",
    "NO_CARD_YET",
    "ONE_POLICY_APPROVER",
    "NO_OPEN_DUPLICATE",
    "OUTCOME_IS_A_TARGET",
    "RESEND_BEFORE_DEADLINE",
    "TIMER_DUE",
    "TRANSITIONS",
    "UNDER_OPEN_CARD_CAP",
    "VERSION_AND_ARGS_HASH_MATCH",
    "WITHIN_POLICY_BUDGET",
    "Actor",
    "Aftermath",
    "CardTransition",
    "Guard",
]


class Actor(StrEnum):
    """Who may cause a transition."""

    AGENT = "agent"
    """The requester, through the MCP surface: it proposes, and may cancel its own card."""
    ADMIN = "admin"
    """A person, through the admin API, the console or the CLI."""
    POLICY = "policy"
    """A configured approval rule (``policy:<rule>``), right after the card is made: one approval at most."""
    WORKER = "worker"
    """The worker that runs an approved card, holding its lease and fencing token."""
    LEDGER_TIMER = "ledger-timer"
    """The sweeper acting on a due timer: a deadline, a requeue interval, a lease that ran out."""
    RECONCILER = "reconciler"
    """The status query that settles an UNKNOWN write by asking the backend about the card's key, and
    may resend it with that same key."""


class Aftermath(StrEnum):
    """What a refused transition still leaves behind on the card."""

    NOTHING = "nothing"
    """The stored card is byte-identical to before."""
    EXPIRES = "expires"
    """The card was past its deadline: it is EXPIRED now (event ``expired``, actor ``ledger``)."""
    HANDS_OVER = "hands-over"
    """The card was past its execute_by with a send that may have landed: it is NEEDS_RECONCILIATION now
    (event ``handed_over``, actor ``ledger``), with the reason in its evidence, for a person to resolve."""
    RECORDS = "records"
    """The attempt is appended to the card's history (and its version moves on); every other field stays."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Guard:
    """A condition a script checks before its first write."""

    name: str
    """What must hold, in a few words."""
    refusal: TransitionStatus
    """The answer when it does not hold."""
    aftermath: Aftermath = Aftermath.NOTHING
    """What that refusal still leaves on the card."""


NO_OPEN_DUPLICATE = Guard(name="no open card with the same dedupe key", refusal=TransitionStatus.EXISTING)
"""An identical proposal answers with the first card while that one is undecided, approved, executing or
unsettled (UNKNOWN, NEEDS_RECONCILIATION), or SUCCEEDED within its repeat window; it is refused by returning
the first card, not an error."""
NO_CARD_YET = Guard(name="no card with this id", refusal=TransitionStatus.ERR_EXISTS)
"""A proposal never overwrites a card; ids are minted fresh, so this refuses only a collision."""
UNDER_OPEN_CARD_CAP = Guard(
    name="the requester holds fewer open cards than its cap", refusal=TransitionStatus.ERR_QUOTA_EXCEEDED
)
"""A card counts against its requester's cap while PENDING, APPROVED or EXECUTING its first attempt
(`gateway.store.ledger.scripts`); at the cap nothing is made until one of them is decided or settled."""
IN_A_SOURCE_STATE = Guard(name="in a source state", refusal=TransitionStatus.ERR_STATE)
"""The card's state is one of the row's `sources`."""
DEADLINE_NOT_PASSED = Guard(
    name="deadline not passed", refusal=TransitionStatus.ERR_EXPIRED, aftermath=Aftermath.EXPIRES
)
"""A PENDING card is before its decide_by, an APPROVED one before its execute_by, and a card never sent
before is dispatched only before its execute_by (Redis clock)."""
NOT_THE_REQUESTER = Guard(name="not the requester", refusal=TransitionStatus.ERR_SELF_APPROVAL)
"""Nobody approves their own card."""
VERSION_AND_ARGS_HASH_MATCH = Guard(name="version and args_hash match", refusal=TransitionStatus.ERR_STALE)
"""The admin names the version and args_hash they reviewed, and the card still has both (an approval
always; a rejection when it names them)."""
NOT_ALREADY_AN_APPROVER = Guard(name="not already an approver", refusal=TransitionStatus.ERR_DUPLICATE_APPROVER)
"""A quorum counts distinct approvers."""
ONE_POLICY_APPROVER = Guard(name="a policy is one approver at most", refusal=TransitionStatus.ERR_DUPLICATE_APPROVER)
"""A policy approver (``policy:<rule>``) is refused when any policy approved the card already: of a quorum
of two, one approval at least is a person's."""
WITHIN_POLICY_BUDGET = Guard(
    name="a policy approval is within its requester's daily budget", refusal=TransitionStatus.ERR_QUOTA_EXCEEDED
)
"""A policy approval counts against its requester's policy approvals of the UTC day, in the same script;
one made without that count (a person's call naming a ``policy:`` approver) is refused the same way."""
TIMER_DUE = Guard(name="something due", refusal=TransitionStatus.NOT_DUE)
"""An APPROVED card is always due (it is enqueued again); a PENDING one only past its decide_by,
which expires it. A PENDING card not due keeps its state and fields; only its timer is set again."""
FENCE_MATCHES = Guard(name="fence matches", refusal=TransitionStatus.ERR_FENCE)
"""The caller's fencing token is the card's current one: a worker that lost the card is turned away."""
LEASE_NOT_EXPIRED = Guard(name="lease not expired", refusal=TransitionStatus.ERR_LEASE)
"""A worker dispatches only while its lease runs; once it ran out the card may be recovered and claimed again."""
LEASE_EXPIRED = Guard(name="lease expired", refusal=TransitionStatus.NOT_DUE)
"""A card is recovered from its worker only once the lease ran out."""
EXECUTING_UNDER_THIS_FENCE = Guard(name="executing under the caller's fence", refusal=TransitionStatus.ERR_FENCE)
"""The card is EXECUTING under the caller's fencing token; a wrong state is refused like a lost fence."""
NOT_A_LATE_RESULT = Guard(name="not a late result", refusal=TransitionStatus.ERR_FENCE, aftermath=Aftermath.RECORDS)
"""As `EXECUTING_UNDER_THIS_FENCE`, but a late or fenced-off result is recorded (``late_result_ignored``),
in any state, terminal ones included: it is evidence of a send, and it never overwrites the card."""
RESEND_BEFORE_DEADLINE = Guard(
    name="a resend starts before execute_by", refusal=TransitionStatus.ERR_EXPIRED, aftermath=Aftermath.HANDS_OVER
)
"""A card whose key may already have reached the backend (UNKNOWN, or EXECUTING a resend) is claimed for a
resend, and dispatched, only before its execute_by: a write is never sent late, and one that may have
landed cannot simply expire either."""
OUTCOME_IS_A_TARGET = Guard(name="outcome is a target", refusal=TransitionStatus.ERR_ARGUMENT)
"""The outcome asked for is one of the row's `targets` (reconcile asks for UNKNOWN as ``RESCHEDULE``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CardTransition:
    """One transition of the card state machine; see the module docstring for how to read it."""

    name: str
    """The script, the `RedisLedger` method and, for an admin, the route segment."""
    actors: frozenset[Actor]
    """Who may cause it."""
    sources: frozenset[CardState]
    """The states it may start from; empty for `propose`, which starts from no card."""
    targets: frozenset[CardState]
    """The states an applied run may leave the card in."""
    guards: tuple[Guard, ...]
    """What must hold, in the order the script checks it."""
    wrong_state: Guard
    """The guard, one of `guards`, that refuses a start outside `sources`."""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"transition name {self.name!r} is not an identifier")
        if not self.actors or not self.targets:
            raise ValueError(f"transition {self.name} needs at least one actor and one target")
        if self.wrong_state not in self.guards:
            raise ValueError(f"transition {self.name}: its wrong_state guard is not among its guards")


def _by_name(*rows: CardTransition) -> Mapping[str, CardTransition]:
    table = {row.name: row for row in rows}
    if len(table) != len(rows):
        raise ValueError("two transitions share a name")
    return MappingProxyType(table)


TRANSITIONS: Mapping[str, CardTransition] = _by_name(
    # An agent's write call files a card; nothing else creates one.
    CardTransition(
        name="propose",
        actors=frozenset({Actor.AGENT}),
        sources=frozenset(),
        targets=frozenset({CardState.PENDING}),
        guards=(NO_OPEN_DUPLICATE, NO_CARD_YET, UNDER_OPEN_CARD_CAP),
        wrong_state=NO_CARD_YET,
    ),
    # Below quorum the approval is recorded and the card stays PENDING; at quorum it is APPROVED and
    # enqueued for a worker.
    CardTransition(
        name="approve",
        actors=frozenset({Actor.ADMIN, Actor.POLICY}),
        sources=frozenset({CardState.PENDING}),
        targets=frozenset({CardState.PENDING, CardState.APPROVED}),
        guards=(
            IN_A_SOURCE_STATE,
            DEADLINE_NOT_PASSED,
            NOT_THE_REQUESTER,
            VERSION_AND_ARGS_HASH_MATCH,
            NOT_ALREADY_AN_APPROVER,
            ONE_POLICY_APPROVER,
            WITHIN_POLICY_BUDGET,
        ),
        wrong_state=IN_A_SOURCE_STATE,
    ),
    CardTransition(
        name="reject",
        actors=frozenset({Actor.ADMIN}),
        sources=frozenset({CardState.PENDING}),
        targets=frozenset({CardState.REJECTED}),
        guards=(IN_A_SOURCE_STATE, DEADLINE_NOT_PASSED, VERSION_AND_ARGS_HASH_MATCH),
        wrong_state=IN_A_SOURCE_STATE,
    ),
    CardTransition(
        name="cancel",
        actors=frozenset({Actor.AGENT, Actor.ADMIN}),
        sources=frozenset({CardState.PENDING, CardState.APPROVED}),
        targets=frozenset({CardState.CANCELLED}),
        guards=(IN_A_SOURCE_STATE, DEADLINE_NOT_PASSED),
        wrong_state=IN_A_SOURCE_STATE,
    ),
    # Past its deadline the card expires, and that is the sweep's success; an APPROVED card not yet
    # past it is enqueued again (``requeued``), in case its outbox entry was lost.
    CardTransition(
        name="sweep_open",
        actors=frozenset({Actor.LEDGER_TIMER}),
        sources=frozenset({CardState.PENDING, CardState.APPROVED}),
        targets=frozenset({CardState.APPROVED, CardState.EXPIRED}),
        guards=(IN_A_SOURCE_STATE, TIMER_DUE),
        wrong_state=IN_A_SOURCE_STATE,
    ),
    CardTransition(
        name="claim",
        actors=frozenset({Actor.WORKER}),
        sources=frozenset({CardState.APPROVED}),
        targets=frozenset({CardState.EXECUTING}),
        guards=(IN_A_SOURCE_STATE, DEADLINE_NOT_PASSED),
        wrong_state=IN_A_SOURCE_STATE,
    ),
    # A resend of an UNKNOWN write with the same key, once the backend said it never saw the key. It
    # marks the card a resend for good: it can no longer go back to APPROVED or EXPIRED. Past
    # execute_by none starts: the card goes to a person.
    CardTransition(
        name="claim_resend",
        actors=frozenset({Actor.RECONCILER}),
        sources=frozenset({CardState.UNKNOWN}),
        targets=frozenset({CardState.EXECUTING}),
        guards=(IN_A_SOURCE_STATE, RESEND_BEFORE_DEADLINE),
        wrong_state=IN_A_SOURCE_STATE,
    ),
    # Recorded, durably, before anything is sent; the card stays EXECUTING. Past execute_by nothing is
    # sent: a first send expires the card, a resend hands it to a person.
    CardTransition(
        name="dispatch",
        actors=frozenset({Actor.WORKER}),
        sources=frozenset({CardState.EXECUTING}),
        targets=frozenset({CardState.EXECUTING}),
        guards=(IN_A_SOURCE_STATE, FENCE_MATCHES, LEASE_NOT_EXPIRED, DEADLINE_NOT_PASSED, RESEND_BEFORE_DEADLINE),
        wrong_state=IN_A_SOURCE_STATE,
    ),
    CardTransition(
        name="complete",
        actors=frozenset({Actor.WORKER}),
        sources=frozenset({CardState.EXECUTING}),
        targets=frozenset({CardState.SUCCEEDED, CardState.FAILED, CardState.UNKNOWN}),
        guards=(OUTCOME_IS_A_TARGET, NOT_A_LATE_RESULT),
        wrong_state=NOT_A_LATE_RESULT,
    ),
    # Nothing was sent: back to APPROVED with the same key, or EXPIRED once past execute_by. A resend
    # that was not sent goes back to UNKNOWN instead: its earlier send may have landed.
    CardTransition(
        name="release",
        actors=frozenset({Actor.WORKER}),
        sources=frozenset({CardState.EXECUTING}),
        targets=frozenset({CardState.APPROVED, CardState.EXPIRED, CardState.UNKNOWN}),
        guards=(EXECUTING_UNDER_THIS_FENCE,),
        wrong_state=EXECUTING_UNDER_THIS_FENCE,
    ),
    # The lease ran out. Sent, or a resend (sent or not): UNKNOWN, never a blind resend. Never sent:
    # APPROVED and enqueued again, or EXPIRED once past execute_by.
    CardTransition(
        name="recover",
        actors=frozenset({Actor.LEDGER_TIMER}),
        sources=frozenset({CardState.EXECUTING}),
        targets=frozenset({CardState.APPROVED, CardState.UNKNOWN, CardState.EXPIRED}),
        guards=(IN_A_SOURCE_STATE, LEASE_EXPIRED),
        wrong_state=IN_A_SOURCE_STATE,
    ),
    # RESCHEDULE (``status_checked``) keeps the card UNKNOWN until the next status query.
    CardTransition(
        name="reconcile",
        actors=frozenset({Actor.RECONCILER}),
        sources=frozenset({CardState.UNKNOWN}),
        targets=frozenset({CardState.UNKNOWN, CardState.SUCCEEDED, CardState.FAILED, CardState.NEEDS_RECONCILIATION}),
        guards=(IN_A_SOURCE_STATE, OUTCOME_IS_A_TARGET),
        wrong_state=IN_A_SOURCE_STATE,
    ),
    CardTransition(
        name="resolve",
        actors=frozenset({Actor.ADMIN}),
        sources=frozenset({CardState.NEEDS_RECONCILIATION}),
        targets=frozenset({CardState.SUCCEEDED, CardState.FAILED}),
        guards=(IN_A_SOURCE_STATE, OUTCOME_IS_A_TARGET),
        wrong_state=IN_A_SOURCE_STATE,
    ),
)
"""Every transition of a card, by name, in the order a card meets them."""
