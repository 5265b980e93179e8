"""Every ledger script held to the transition table (`gateway.cards.transitions`), on a real Redis.

A card is put into a state by proposing it and rewriting its stored JSON (state, fence, lease,
dispatch flag, deadlines): this tests the scripts' guards, so the stored form is written directly.
Each transition then runs with arguments that satisfy every guard but the one under test, and the
answer is held to the table: applied exactly from the listed sources, ending in a listed target,
and refused with the guard's status, leaving the card byte-identical unless the guard says what a
refusal still leaves. The table is also held to the code around it: a row per script, a
`RedisLedger` method per row, an admin route per admin transition, one hash slot per script call.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot
from starlette.routing import BaseRoute, Mount, Route

from gateway.cards.card import OPEN, TERMINAL, Card, CardState
from gateway.cards.contract import Ledger, Transition, TransitionStatus
from gateway.cards.transitions import (
    DEADLINE_NOT_PASSED,
    EXECUTING_UNDER_THIS_FENCE,
    FENCE_MATCHES,
    LEASE_EXPIRED,
    LEASE_NOT_EXPIRED,
    NO_OPEN_DUPLICATE,
    NOT_A_LATE_RESULT,
    NOT_ALREADY_AN_APPROVER,
    NOT_THE_REQUESTER,
    ONE_POLICY_APPROVER,
    OUTCOME_IS_A_TARGET,
    RESEND_BEFORE_DEADLINE,
    TIMER_DUE,
    TRANSITIONS,
    UNDER_OPEN_CARD_CAP,
    VERSION_AND_ARGS_HASH_MATCH,
    WITHIN_POLICY_BUDGET,
    Actor,
    Aftermath,
    CardTransition,
    Guard,
)
from gateway.limits.budgets import Limits
from gateway.runtime.app import create_app
from gateway.store.ledger.codec import decode_card
from gateway.store.ledger.redis_ledger import SHARDS, RedisLedger, card_shard
from gateway.store.ledger.scripts import SCRIPTS
from tests.support.cards import PROPOSAL
from tests.support.services import gateway_settings

pytestmark = pytest.mark.anyio

FENCE = 3
PAST, FUTURE = "past", "future"
"""Stand-ins for a time a minute before / an hour after the Redis clock, filled in when a card is stored."""
HISTORY = frozenset({"version", "seq", "chain", "updated_ms", "events", "applied", "counted"})
"""The stored fields a recorded refusal may change (``counted`` follows a state `_store` set by hand)."""


@pytest.fixture(scope="module", name="redis_url")
def ledger_database(quiet_redis_url: str) -> str:
    """A database no worker drains (see conftest)."""
    return quiet_redis_url


# -- putting a card in a state, and calling a transition on it --------------------------------------


@dataclass(frozen=True, kw_only=True)
class Call:
    """How a transition is called. The defaults satisfy every guard of a card stored by `_store`."""

    approver: str = "bob@acme.example"
    version_offset: int = 0
    args_hash: str = "h1"
    fence: int = FENCE
    outcome: CardState | None = None
    """For complete, reconcile and resolve; None asks for SUCCEEDED."""
    policy_budget: int | None = None
    """For approve: approve as the policy ``policy:small`` with this daily budget; None: as `approver`."""
    proposal: Literal["onto", "duplicate", "new", "over_cap"] = "onto"
    """For propose: "onto" the stored card's id, a "duplicate" of it, a "new" one, or a new one by a
    requester whose cap is one card (the stored one)."""


@dataclass(frozen=True, kw_only=True)
class Setup:
    """A stored card and a call: `fields` are written over the stored card, `start` is its state."""

    start: CardState | None = None
    """None: each of the row's sources in turn."""
    fields: Mapping[str, str] = field(default_factory=dict)
    call: Call = Call()


SATISFY: Mapping[str, Mapping[str, str]] = {
    "sweep_open": {"decide_by_ms": PAST},  # a PENDING card is due only past its deadline
    "recover": {"lease_until_ms": PAST},  # a lease is recovered only once it ran out
}
"""Per transition, what the stored card needs beyond `_store`'s defaults for every guard to hold."""


def _card_key(card_id: str) -> str:
    shard = card_shard(card_id)
    assert shard is not None
    return RedisLedger._keys(card_id, shard)[0]


async def _store(ledger: RedisLedger, redis: Redis, state: CardState, fields: Mapping[str, str]) -> Card:
    """A proposed card, rewritten to `state`: fenced, leased, not dispatched, both deadlines ahead."""
    created = await ledger.propose(PROPOSAL)
    assert created.card is not None
    key = _card_key(created.card.card_id)
    stored = decode_card(await redis.get(key), created.card.card_id)
    now = await ledger.server_time_ms()
    times = {PAST: str(now - 60_000), FUTURE: str(now + 3_600_000)}
    stored |= {
        "state": state.value,
        "fence": str(FENCE),
        "lease_owner": "w1",
        "lease_until_ms": FUTURE,
        "dispatched": "0",
        "decide_by_ms": FUTURE,
        "execute_by_ms": FUTURE,
        **fields,
    }
    stored |= {name: times[value] for name, value in stored.items() if value in (PAST, FUTURE)}
    await redis.set(key, json.dumps(stored))
    card = await ledger.get(created.card.card_id)
    assert card is not None
    return card


async def _propose(ledger: RedisLedger, card: Card, call: Call) -> Transition:
    if call.proposal == "duplicate":
        return await ledger.propose(PROPOSAL)
    if call.proposal == "new":
        return await ledger.propose(replace(PROPOSAL, dedupe_key=secrets.token_hex(8)))
    if call.proposal == "over_cap":
        capped = RedisLedger(ledger._client, limits=Limits(open_cards_per_requester=1))
        return await capped.propose(replace(PROPOSAL, dedupe_key=secrets.token_hex(8)))
    # The propose script itself, for an id that is already taken.
    shard = card_shard(card.card_id)
    assert shard is not None
    keys = RedisLedger._proposal_keys(card.card_id, shard, card.requester_org, card.requester_subject)
    fields = json.dumps({"card_id": card.card_id, "requester_subject": card.requester_subject})
    args: list[str | int] = [secrets.token_hex(12), fields, secrets.token_hex(16), 60_000, 50, "0" * 16]
    return await ledger._eval("propose", keys, args)


def _outcome(call: Call) -> CardState:
    return call.outcome or CardState.SUCCEEDED


RUNS: Mapping[str, Callable[[RedisLedger, Card, Call], Awaitable[Transition]]] = {
    "propose": _propose,
    "approve": lambda ledger, card, call: (
        ledger.approve(
            card.card_id,
            approver=call.approver,
            version=card.version + call.version_offset,
            args_hash=call.args_hash,
            comment="",
        )
        if call.policy_budget is None
        else ledger.approve_by_policy(
            card.card_id,
            rule="small",
            requester=(card.requester_org, card.requester_subject),
            version=card.version + call.version_offset,
            args_hash=call.args_hash,
            day="20261201",
            budget=call.policy_budget,
        )
    ),
    "reject": lambda ledger, card, call: ledger.reject(
        card.card_id,
        admin="bob@acme.example",
        reason="no",
        version=card.version + call.version_offset,
        args_hash=call.args_hash,
    ),
    "cancel": lambda ledger, card, call: ledger.cancel(card.card_id, actor="alice@acme.example"),
    "sweep_open": lambda ledger, card, call: ledger.sweep_open(card.card_id, requeue_ms=1000),
    "claim": lambda ledger, card, call: ledger.claim(card.card_id, worker="w2", lease_ms=60_000),
    "claim_resend": lambda ledger, card, call: ledger.claim_resend(
        card.card_id, worker="w2", lease_ms=60_000, max_resends=3
    ),
    "dispatch": lambda ledger, card, call: ledger.dispatch(card.card_id, fence=call.fence),
    "complete": lambda ledger, card, call: ledger.complete(
        card.card_id, fence=call.fence, outcome=_outcome(call), reference="bk-1", evidence={}, settle_ms=1000
    ),
    "release": lambda ledger, card, call: ledger.release(card.card_id, fence=call.fence, reason="x", requeue_ms=1000),
    "recover": lambda ledger, card, call: ledger.recover(card.card_id),
    "reconcile": lambda ledger, card, call: ledger.reconcile(
        card.card_id,
        result="RESCHEDULE" if _outcome(call) is CardState.UNKNOWN else _outcome(call).value,
        reference="bk-1",
        evidence={},
        next_at_ms=0,
    ),
    "resolve": lambda ledger, card, call: ledger.resolve(
        card.card_id, admin="bob@acme.example", outcome=_outcome(call).value, evidence={}
    ),
}
"""How each transition is called, by name."""


def _cases(pairs: Iterator[tuple[CardTransition, Any, Setup]]) -> list[Any]:
    """Parameters (row, label, setup, start), one per start state a setup applies to."""
    return [
        pytest.param(row, label, setup, start, id=f"{row.name}-{getattr(label, 'name', label)}-{start}")
        for row, label, setup in pairs
        for start in ([setup.start] if setup.start is not None else sorted(row.sources))
    ]


def _assert_refused(guard: Guard, result: Transition, card_id: str, before: bytes, after: bytes) -> None:
    """A refusal by `guard`: its status, and on the card exactly what its aftermath says."""
    assert result.status is guard.refusal
    old, new = decode_card(before, card_id), decode_card(after, card_id)
    if guard.aftermath is Aftermath.NOTHING:
        assert after == before
        return
    also = {"state", "evidence"} if guard.aftermath is Aftermath.HANDS_OVER else {"state"}
    assert _beyond_history(new, also) == _beyond_history(old, also)
    assert len(new["events"]) == len(old["events"]) + 1
    if guard.aftermath is Aftermath.EXPIRES:
        assert new["state"] == CardState.EXPIRED and new["events"][-1]["type"] == "expired"
        assert result.card is not None and result.card.state is CardState.EXPIRED
    elif guard.aftermath is Aftermath.HANDS_OVER:
        assert new["state"] == CardState.NEEDS_RECONCILIATION and new["events"][-1]["type"] == "handed_over"
        assert result.card is not None and result.card.state is CardState.NEEDS_RECONCILIATION
        assert "execute_by" in result.card.evidence["reason"]
    else:
        assert new["state"] == old["state"]


def _beyond_history(stored: Mapping[str, Any], also: set[str]) -> dict[str, Any]:
    """The stored fields other than the history (and `also`)."""
    return {name: value for name, value in stored.items() if name not in HISTORY | also}


# -- the table against the scripts ------------------------------------------------------------------


@pytest.mark.parametrize("state", list(CardState))
@pytest.mark.parametrize("row", TRANSITIONS.values(), ids=lambda row: row.name)
async def test_each_transition_applies_exactly_from_the_states_the_table_lists(
    redis: Redis, row: CardTransition, state: CardState
) -> None:
    """With every other guard satisfied, a script applies (one event, one version) exactly from the listed sources."""
    ledger = RedisLedger(redis)
    card = await _store(ledger, redis, state, SATISFY.get(row.name, {}))
    before = await redis.get(_card_key(card.card_id))
    result = await RUNS[row.name](ledger, card, Call())
    after = await redis.get(_card_key(card.card_id))
    if state in row.sources:
        assert result.status is TransitionStatus.OK
        assert result.card is not None and result.card.state in row.targets
        old, new = decode_card(before, card.card_id), decode_card(after, card.card_id)
        assert new["state"] == result.card.state
        assert len(new["events"]) == len(old["events"]) + 1 and int(new["version"]) == int(old["version"]) + 1
    else:
        _assert_refused(row.wrong_state, result, card.card_id, before, after)


VIOLATIONS: Mapping[Guard, Callable[[CardTransition], list[Setup]]] = {
    NO_OPEN_DUPLICATE: lambda row: [Setup(call=Call(proposal="duplicate"), start=CardState.PENDING)],
    UNDER_OPEN_CARD_CAP: lambda row: [Setup(call=Call(proposal="over_cap"), start=CardState.PENDING)],
    DEADLINE_NOT_PASSED: lambda row: [Setup(fields={"decide_by_ms": PAST, "execute_by_ms": PAST})],
    RESEND_BEFORE_DEADLINE: lambda row: [Setup(fields={"execute_by_ms": PAST, "resend": "1"})],
    NOT_THE_REQUESTER: lambda row: [Setup(call=Call(approver=PROPOSAL.requester_subject))],
    VERSION_AND_ARGS_HASH_MATCH: lambda row: [Setup(call=Call(version_offset=-1)), Setup(call=Call(args_hash="h2"))],
    NOT_ALREADY_AN_APPROVER: lambda row: [
        Setup(fields={"approvers": '["bob@acme.example"]', "approvals_required": "2"})
    ],
    ONE_POLICY_APPROVER: lambda row: [
        Setup(fields={"approvers": '["policy:other"]', "approvals_required": "2"}, call=Call(policy_budget=5))
    ],
    # A spent budget, and a person's call that names a policy approver (it brings no budget at all).
    WITHIN_POLICY_BUDGET: lambda row: [Setup(call=Call(policy_budget=0)), Setup(call=Call(approver="policy:small"))],
    TIMER_DUE: lambda row: [Setup(start=CardState.PENDING, fields={"decide_by_ms": FUTURE})],
    FENCE_MATCHES: lambda row: [Setup(call=Call(fence=FENCE + 1))],
    LEASE_NOT_EXPIRED: lambda row: [Setup(fields={"lease_until_ms": PAST})],
    LEASE_EXPIRED: lambda row: [Setup(fields={"lease_until_ms": FUTURE})],
    EXECUTING_UNDER_THIS_FENCE: lambda row: [Setup(call=Call(fence=FENCE - 1))],
    NOT_A_LATE_RESULT: lambda row: [Setup(call=Call(fence=FENCE - 1))],
    OUTCOME_IS_A_TARGET: lambda row: [
        Setup(call=Call(outcome=state)) for state in CardState if state not in row.targets
    ],
}
"""Per guard, the ways to break it (and only it) for a row; a row's wrong-state check is the matrix above."""


def _violations() -> Iterator[tuple[CardTransition, Any, Setup]]:
    for row in TRANSITIONS.values():
        for guard in row.guards:
            for setup in VIOLATIONS[guard](row) if guard in VIOLATIONS else []:
                yield row, guard, setup


@pytest.mark.parametrize(("row", "guard", "setup", "start"), _cases(_violations()))
async def test_each_guard_refuses_with_its_status_and_leaves_only_what_the_table_says(
    redis: Redis, row: CardTransition, guard: Guard, setup: Setup, start: CardState
) -> None:
    """Breaking one guard from a source state is answered with that guard's refusal and its aftermath."""
    ledger = RedisLedger(redis)
    card = await _store(ledger, redis, start, {**SATISFY.get(row.name, {}), **setup.fields})
    before = await redis.get(_card_key(card.card_id))
    result = await RUNS[row.name](ledger, card, setup.call)
    _assert_refused(guard, result, card.card_id, before, await redis.get(_card_key(card.card_id)))


def test_every_guard_of_every_row_is_broken_by_some_test() -> None:
    """A guard added to the table without a way to break it here fails (a wrong-state check is the matrix's)."""
    for row in TRANSITIONS.values():
        for guard in row.guards:
            assert guard in VIOLATIONS or guard is row.wrong_state, (row.name, guard.name)


REACH: Mapping[tuple[str, CardState], Setup] = {
    ("propose", CardState.PENDING): Setup(start=CardState.PENDING, call=Call(proposal="new")),
    ("approve", CardState.PENDING): Setup(fields={"approvals_required": "2"}),
    ("approve", CardState.APPROVED): Setup(),
    ("reject", CardState.REJECTED): Setup(),
    ("cancel", CardState.CANCELLED): Setup(),
    ("sweep_open", CardState.APPROVED): Setup(start=CardState.APPROVED),
    ("sweep_open", CardState.EXPIRED): Setup(start=CardState.PENDING),
    ("claim", CardState.EXECUTING): Setup(),
    ("claim_resend", CardState.EXECUTING): Setup(),
    ("dispatch", CardState.EXECUTING): Setup(),
    **{("complete", state): Setup(call=Call(outcome=state)) for state in TRANSITIONS["complete"].targets},
    ("release", CardState.APPROVED): Setup(),
    ("release", CardState.EXPIRED): Setup(fields={"execute_by_ms": PAST}),
    ("release", CardState.UNKNOWN): Setup(fields={"resend": "1"}),
    ("recover", CardState.APPROVED): Setup(),
    ("recover", CardState.UNKNOWN): Setup(fields={"dispatched": "1"}),
    ("recover", CardState.EXPIRED): Setup(fields={"execute_by_ms": PAST}),
    **{("reconcile", state): Setup(call=Call(outcome=state)) for state in TRANSITIONS["reconcile"].targets},
    **{("resolve", state): Setup(call=Call(outcome=state)) for state in TRANSITIONS["resolve"].targets},
}
"""Per (transition, target), a setup whose run ends there."""


def _reach() -> Iterator[tuple[CardTransition, Any, Setup]]:
    listed = {(row.name, target) for row in TRANSITIONS.values() for target in row.targets}
    # A listed target missing from REACH, or a REACH entry the table does not list, gets a failing case.
    for name, target in sorted(listed | set(REACH)):
        yield TRANSITIONS[name], target, REACH.get((name, target), Setup(start=CardState.PENDING))


@pytest.mark.parametrize(("row", "target", "setup", "start"), _cases(_reach()))
async def test_every_target_the_table_lists_is_reached_and_no_other(
    redis: Redis, row: CardTransition, target: CardState, setup: Setup, start: CardState
) -> None:
    """Each state a row lists as a target is where some applied run ends, and each such run's end is listed."""
    assert (row.name, target) in REACH, "a target with no setup that reaches it"
    assert target in row.targets, "a run that ends in a state the table does not list"
    ledger = RedisLedger(redis)
    card = await _store(ledger, redis, start, {**SATISFY.get(row.name, {}), **setup.fields})
    result = await RUNS[row.name](ledger, card, setup.call)
    assert result.status is TransitionStatus.OK and result.card is not None and result.card.state is target
    # Wherever it ends, the card counts against its requester's open-card cap exactly when it should.
    counts = target in (CardState.PENDING, CardState.APPROVED) or (
        target is CardState.EXECUTING and not result.card.resend
    )
    assert await _in_open_card_set(redis, result.card) is counts


async def _in_open_card_set(redis: Redis, card: Card) -> bool:
    """Whether `card` counts against its requester's cap; the requester's count is that of its counted cards."""
    ledger = RedisLedger(redis)
    mine = await ledger.recent(limit=10, requester=(card.requester_org, card.requester_subject))
    counted = {c.card_id for c in mine if decode_card(await redis.get(_card_key(c.card_id)), c.card_id).get("counted")}
    assert await ledger.open_cards(card.requester_org, card.requester_subject) == len(counted)
    return card.card_id in counted


@pytest.mark.parametrize("deadline", [PAST, FUTURE], ids=["past-execute-by", "before-execute-by"])
@pytest.mark.parametrize("name", ["release", "recover"])
async def test_a_resend_that_was_not_sent_goes_back_to_unknown(redis: Redis, name: str, deadline: str) -> None:
    """A resend released, or recovered from its worker, before it was sent is UNKNOWN again with its
    status query due, whether or not execute_by passed: its earlier send may have landed, so it never
    goes back to APPROVED (to be sent as if for the first time) or EXPIRED."""
    ledger = RedisLedger(redis)
    fields = {**SATISFY.get(name, {}), "resend": "1", "dispatched": "0", "execute_by_ms": deadline}
    card = await _store(ledger, redis, CardState.EXECUTING, fields)
    result = await RUNS[name](ledger, card, Call())
    assert result.status is TransitionStatus.OK and result.card is not None
    assert result.card.state is CardState.UNKNOWN and result.card.resend
    shard = card_shard(card.card_id)
    assert shard is not None
    assert await redis.zscore(RedisLedger._keys(card.card_id, shard)[4], card.card_id) is not None


@pytest.mark.parametrize(("name", "start"), [("claim_resend", CardState.UNKNOWN), ("dispatch", CardState.EXECUTING)])
async def test_a_resend_past_execute_by_is_handed_over_with_no_timer_left(
    redis: Redis, name: str, start: CardState
) -> None:
    """Handed to a person, a card waits for them alone: the sweeper has nothing more due on it."""
    ledger = RedisLedger(redis)
    card = await _store(ledger, redis, start, {"resend": "1", "execute_by_ms": PAST})
    shard = card_shard(card.card_id)
    assert shard is not None
    timers = RedisLedger._keys(card.card_id, shard)[4]
    await redis.zadd(timers, {card.card_id: 0})
    result = await RUNS[name](ledger, card, Call())
    assert result.status is TransitionStatus.ERR_EXPIRED and result.card is not None
    assert result.card.state is CardState.NEEDS_RECONCILIATION
    assert await redis.zscore(timers, card.card_id) is None


# -- the table against the code around it -----------------------------------------------------------


def test_every_script_has_a_row_and_every_row_a_script() -> None:
    """The table and `SCRIPTS` name the same transitions."""
    assert set(TRANSITIONS) == set(SCRIPTS)


@pytest.mark.parametrize("name", TRANSITIONS)
def test_every_row_has_a_ledger_method_of_its_name(name: str) -> None:
    """Each transition is a method of the `Ledger` Protocol and of `RedisLedger`."""
    assert callable(getattr(Ledger, name, None)) and callable(getattr(RedisLedger, name, None))


def _post_paths(routes: list[BaseRoute], prefix: str = "") -> Iterator[str]:
    """The paths of every POST route, descending into mounts and through the auth that wraps them."""
    for route in routes:
        if isinstance(route, Mount):
            app = route.app
            while not hasattr(app, "routes") and hasattr(app, "app"):
                app = app.app  # a mounted app behind an authenticating wrapper
            yield from _post_paths(list(getattr(app, "routes", [])), prefix + route.path)
        elif isinstance(route, Route) and "POST" in (route.methods or ()):
            yield prefix + route.path


@pytest.fixture(scope="module")
def post_paths(redis_url: str) -> set[str]:
    """The POST routes of a gateway app, as built for serving."""
    return set(_post_paths(list(create_app(gateway_settings(redis_url, {})).routes)))


@pytest.mark.parametrize(
    "row", [row for row in TRANSITIONS.values() if Actor.ADMIN in row.actors], ids=lambda row: row.name
)
def test_every_admin_transition_has_an_admin_api_route(post_paths: set[str], row: CardTransition) -> None:
    """A transition an admin causes is reached by ``POST /admin/api/cards/{card_id}/<name>``."""
    assert f"/admin/api/cards/{{card_id}}/{row.name}" in post_paths


def test_terminal_states_are_those_no_transition_starts_from() -> None:
    """`TERMINAL` is every state outside all sources; `OPEN` is where cancel starts; every state is reached."""
    sources = {state for row in TRANSITIONS.values() for state in row.sources}
    assert TERMINAL == set(CardState) - sources
    assert OPEN == TRANSITIONS["cancel"].sources
    assert {state for row in TRANSITIONS.values() for state in row.targets} == set(CardState)


@pytest.mark.parametrize(
    "change",
    [{"wrong_state": DEADLINE_NOT_PASSED}, {"actors": frozenset()}, {"targets": frozenset()}, {"name": "no-name"}],
    ids=["wrong-state-guard-not-checked", "no-actor", "no-target", "bad-name"],
)
def test_a_malformed_row_is_refused_at_construction(change: dict[str, Any]) -> None:
    """A row whose wrong-state guard it never checks, or with no actor, target or usable name, cannot be built."""
    with pytest.raises(ValueError):
        replace(TRANSITIONS["claim_resend"], **change)


class _RecordingLedger(RedisLedger):
    """A real `RedisLedger` that also notes the keys each script call is given."""

    def __init__(self, client: Redis) -> None:
        super().__init__(client)
        self.calls: list[tuple[str, list[str]]] = []

    async def _eval(self, name: str, keys: list[str], args: list[str | int]) -> Transition:
        self.calls.append((name, keys))
        return await super()._eval(name, keys, args)


async def test_every_key_a_script_is_given_shares_one_hash_slot(redis: Redis) -> None:
    """Every script call, in every shard, names keys of one Redis Cluster slot."""
    ledger = _RecordingLedger(redis)
    # A card's shard is its requester's, so 32 requesters cover every shard.
    cards = [await ledger.propose(replace(PROPOSAL, requester_subject=f"r{n}@acme.example")) for n in range(32)]
    assert {card_shard(c.card.card_id) for c in cards if c.card is not None} == set(range(SHARDS))
    for created in cards:
        assert created.card is not None
        for run in RUNS.values():
            await run(ledger, created.card, Call())
    assert {name for name, _ in ledger.calls} == set(TRANSITIONS)
    for name, keys in ledger.calls:
        assert len({key_slot(key.encode()) for key in keys}) == 1, (name, keys)
