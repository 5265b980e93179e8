"""The open-card cap, enforced by the propose script on a real Redis.

A requester (org and subject) holds at most its cap of cards that are PENDING, APPROVED or EXECUTING
their first attempt. The next proposal is refused with ``ERR_QUOTA_EXCEEDED`` and makes nothing; an
identical proposal still gets its open card; every transition out of those states frees the slot,
and the count is exact under concurrency and over any sequence of real transitions.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from gateway.cards.card import CardState
from gateway.cards.contract import Proposal, TransitionStatus
from gateway.limits.budgets import Limits, OrgLimits
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.cards import PROPOSAL
from tests.support.examples import examples

pytestmark = pytest.mark.anyio

ALICE = ("acme", PROPOSAL.requester_subject)


@pytest.fixture(name="redis_url")
def ledger_database(quiet_redis_url: str) -> str:
    """A database no worker drains (see conftest): the tests move cards by hand."""
    return quiet_redis_url


def _proposal(n: int, **changes: object) -> Proposal:
    return replace(PROPOSAL, dedupe_key=f"cap|{n}", **changes)  # type: ignore[arg-type]


async def _cards_in_redis(redis: Redis) -> int:
    return len([key async for key in redis.scan_iter(match="cs:{cs*}:card:*")])


def _counts(state: CardState, resend: bool) -> bool:
    """Whether a card in `state` counts against its requester's cap (the prelude's rule)."""
    return state in (CardState.PENDING, CardState.APPROVED) or (state is CardState.EXECUTING and not resend)


async def test_the_proposal_past_the_cap_is_refused_with_the_counts_and_makes_no_card(redis: Redis) -> None:
    """Three open cards at a cap of three: the fourth proposal is refused, says why, and stores nothing."""
    ledger = RedisLedger(redis, limits=Limits(open_cards_per_requester=3))
    for n in range(3):
        assert (await ledger.propose(_proposal(n))).status is TransitionStatus.OK
    refused = await ledger.propose(_proposal(3))
    assert refused.status is TransitionStatus.ERR_QUOTA_EXCEEDED and refused.card is None
    assert refused.extra == {"limit": 3, "open": 3}
    assert await _cards_in_redis(redis) == 3
    assert await ledger.open_cards(*ALICE) == 3


async def test_other_requesters_and_per_org_caps_are_counted_apart(redis: Redis) -> None:
    """One requester at its cap does not hold back another; an org's override replaces the default."""
    limits = Limits(open_cards_per_requester=1, orgs={"globex": OrgLimits(open_cards_per_requester=2)})
    ledger = RedisLedger(redis, limits=limits)
    assert (await ledger.propose(_proposal(0))).ok
    assert (await ledger.propose(_proposal(1))).status is TransitionStatus.ERR_QUOTA_EXCEEDED
    assert (await ledger.propose(_proposal(2, requester_subject="dan@acme.example"))).ok
    gus = {"requester_org": "globex", "requester_subject": "gus@globex.example"}
    assert [(await ledger.propose(_proposal(n, **gus))).status for n in range(3, 6)] == [
        TransitionStatus.OK,
        TransitionStatus.OK,
        TransitionStatus.ERR_QUOTA_EXCEEDED,
    ]


async def test_an_identical_proposal_at_the_cap_still_returns_its_open_card(redis: Redis) -> None:
    """Dedupe comes before the cap: re-proposing an open card answers with that card, not a refusal."""
    ledger = RedisLedger(redis, limits=Limits(open_cards_per_requester=2))
    first = await ledger.propose(_proposal(0))
    assert (await ledger.propose(_proposal(1))).ok and first.card is not None
    again = await ledger.propose(_proposal(0))
    assert again.status is TransitionStatus.EXISTING and again.card is not None
    assert again.card.card_id == first.card.card_id
    assert await _cards_in_redis(redis) == 2


async def test_a_decision_frees_a_slot_and_an_approved_card_holds_one_until_it_settles(redis: Redis) -> None:
    """A rejection frees its slot at once; an approval keeps it (the card still waits for a worker) until the
    write completes."""
    ledger = RedisLedger(redis, limits=Limits(open_cards_per_requester=2))
    a, b = [(await ledger.propose(_proposal(n))).card for n in range(2)]
    assert a is not None and b is not None
    assert (await ledger.reject(a.card_id, admin="bob@acme.example", reason="no")).ok
    c = (await ledger.propose(_proposal(2))).card
    assert c is not None
    approved = await ledger.approve(
        b.card_id, approver="bob@acme.example", version=b.version, args_hash="h1", comment=""
    )
    assert approved.ok
    assert (await ledger.propose(_proposal(3))).status is TransitionStatus.ERR_QUOTA_EXCEEDED
    claimed = await ledger.claim(b.card_id, worker="w1", lease_ms=60_000)
    assert claimed.card is not None and (await ledger.dispatch(b.card_id, fence=claimed.card.fence)).ok
    assert (await ledger.propose(_proposal(3))).status is TransitionStatus.ERR_QUOTA_EXCEEDED
    done = await ledger.complete(b.card_id, fence=claimed.card.fence, outcome=CardState.SUCCEEDED, reference="bk",
                                 evidence={}, settle_ms=1000)  # fmt: skip
    assert done.ok
    assert (await ledger.propose(_proposal(3))).ok


async def test_concurrent_proposals_at_the_cap_make_exactly_the_cap_in_cards(redis: Redis) -> None:
    """Forty distinct proposals at once against a cap of five: exactly five cards, thirty-five refusals."""
    ledger = RedisLedger(redis, limits=Limits(open_cards_per_requester=5))
    results = await asyncio.gather(*(ledger.propose(_proposal(n)) for n in range(40)))
    statuses = [result.status for result in results]
    assert statuses.count(TransitionStatus.OK) == 5
    assert statuses.count(TransitionStatus.ERR_QUOTA_EXCEEDED) == 35
    assert await _cards_in_redis(redis) == 5 and await ledger.open_cards(*ALICE) == 5


# -- the count over any sequence of real transitions ------------------------------------------------

CAP = 3
STEPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "propose",
                "propose_short",
                "duplicate",
                "approve",
                "reject",
                "cancel",
                "sweep",
                "claim",
                "claim_short",
                "dispatch",
                "succeed",
                "fail",
                "unknown",
                "release",
                "recover",
                "reconcile_unsettled",
                "reconcile_lost",
                "claim_resend",
                "resolve",
            ]
        ),
        st.integers(min_value=0, max_value=7),
    ),
    min_size=1,
    max_size=30,
)


async def _step(ledger: RedisLedger, ids: list[str], made: list[int], action: str, pick: int) -> None:
    """Run one real transition (the scripts refuse what does not apply; that is part of the sequence)."""
    if action in ("propose", "propose_short"):
        made[0] += 1
        window = 1 if action == "propose_short" else 60_000  # a short one expires on the next sweep
        created = await ledger.propose(_proposal(made[0], decide_within_ms=window, execute_within_ms=window))
        if created.status is TransitionStatus.OK and created.card is not None:
            ids.append(created.card.card_id)
        return
    if not ids:
        return
    card = await ledger.get(ids[pick % len(ids)])
    assert card is not None
    cid, fence = card.card_id, card.fence
    if action == "duplicate":  # of an earlier proposal: its open card, or a new card once that one closed
        again = await ledger.propose(_proposal(pick % made[0] + 1))
        if again.status is TransitionStatus.OK and again.card is not None:
            ids.append(again.card.card_id)
    elif action == "approve":
        await ledger.approve(cid, approver="bob@acme.example", version=card.version, args_hash="h1", comment="")
    elif action == "reject":
        await ledger.reject(cid, admin="bob@acme.example", reason="no")
    elif action == "cancel":
        await ledger.cancel(cid, actor=PROPOSAL.requester_subject)
    elif action == "sweep":
        await ledger.sweep_open(cid, requeue_ms=1000)
    elif action in ("claim", "claim_short"):
        await ledger.claim(cid, worker="w1", lease_ms=1 if action == "claim_short" else 60_000)
    elif action == "claim_resend":
        await ledger.claim_resend(cid, worker="w1", lease_ms=60_000, max_resends=3)
    elif action == "dispatch":
        await ledger.dispatch(cid, fence=fence)
    elif action in ("succeed", "fail", "unknown"):
        outcome = {"succeed": CardState.SUCCEEDED, "fail": CardState.FAILED, "unknown": CardState.UNKNOWN}[action]
        await ledger.complete(cid, fence=fence, outcome=outcome, reference="bk", evidence={}, settle_ms=1000)
    elif action == "release":
        await ledger.release(cid, fence=fence, reason="x", requeue_ms=1000)
    elif action == "recover":
        await ledger.recover(cid)
    elif action == "reconcile_unsettled":
        await ledger.reconcile(cid, result="RESCHEDULE", reference="", evidence={}, next_at_ms=0)
    elif action == "reconcile_lost":
        await ledger.reconcile(cid, result="NEEDS_RECONCILIATION", reference="", evidence={})
    else:
        await ledger.resolve(cid, admin="bob@acme.example", outcome="FAILED", evidence={})


@settings(
    database=None, max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=STEPS)
def test_the_count_is_exactly_the_cards_that_count_after_every_transition(
    redis_url: str, steps: list[tuple[str, int]]
) -> None:
    """Whatever real transitions run, in whatever order, after each one the open-card set holds exactly the
    requester's cards that count, and never more than the cap."""

    async def run() -> None:
        client = Redis.from_url(redis_url)
        try:
            await client.flushdb()
            ledger = RedisLedger(client, limits=Limits(open_cards_per_requester=CAP))
            ids: list[str] = []
            made = [0]
            for action, pick in steps:
                await _step(ledger, ids, made, action, pick)
                cards = [await ledger.get(card_id) for card_id in ids]
                counted = sum(1 for c in cards if c is not None and _counts(c.state, c.resend))
                assert await ledger.open_cards(*ALICE) == counted <= CAP, action
        finally:
            await client.flushdb()
            await client.aclose()

    anyio.run(run)
