"""The ledger's transitions against a real Redis: atomicity, races, expiry, replay, the event chain."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from gateway.cards.card import COMPACTED, CardState, verify_chain
from gateway.store.ledger.codec import decode_card
from gateway.store.ledger.redis_ledger import RedisLedger, card_shard
from gateway.store.ledger.scripts import HEAD_EVENTS, MAX_APPLIED, MAX_EVENTS
from tests.support.cards import PROPOSAL as BASE_PROPOSAL

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", name="redis_url")
def ledger_database(quiet_redis_url: str) -> str:
    """A database no worker drains (see conftest)."""
    return quiet_redis_url


PROPOSAL = BASE_PROPOSAL


async def _pending(ledger: RedisLedger, **changes: Any) -> str:
    created = await ledger.propose(replace(PROPOSAL, **changes))
    assert created.status == "OK" and created.card is not None
    return created.card.card_id


async def _approved(ledger: RedisLedger, **changes: Any) -> str:
    card_id = await _pending(ledger, **changes)
    card = await ledger.get(card_id)
    assert card is not None
    result = await ledger.approve(card_id, approver="bob@acme.example", version=card.version,
                                  args_hash=card.args_hash, comment="ok")  # fmt: skip
    assert result.status == "OK" and result.card is not None and result.card.state is CardState.APPROVED
    return card_id


async def test_proposal_creates_a_pending_card_with_minted_key_and_one_event(redis: Redis) -> None:
    """A new card is PENDING, version 1, with a server-minted idempotency key and a 'created' event."""
    ledger = RedisLedger(redis)
    card = await ledger.get(await _pending(ledger))
    assert card is not None and card.state is CardState.PENDING and card.version == 1
    assert card.idempotency_key.startswith("cs-") and card.transaction_id.startswith("txn_")
    events = await ledger.events(card.card_id)
    assert [e.type for e in events] == ["created"] and verify_chain(events)


async def test_identical_open_proposal_returns_the_existing_card(redis: Redis) -> None:
    """Same dedupe key while open: the earlier card comes back, no second card."""
    ledger = RedisLedger(redis)
    first = await _pending(ledger)
    again = await ledger.propose(PROPOSAL)
    assert again.status == "EXISTING" and again.card is not None and again.card.card_id == first
    assert len(await ledger.recent()) == 1


async def test_fifty_concurrent_approvals_have_exactly_one_winner(redis: Redis) -> None:
    """50 distinct admins approve at once: one OK, the others see the new state."""
    ledger = RedisLedger(redis)
    card_id = await _pending(ledger)
    card = await ledger.get(card_id)
    assert card is not None
    results = await asyncio.gather(
        *(
            ledger.approve(
                card_id, approver=f"admin{i}@acme.example", version=card.version, args_hash=card.args_hash, comment=""
            )
            for i in range(50)
        )  # fmt: skip
    )
    assert sorted(r.status for r in results).count("OK") == 1
    assert {r.status for r in results} == {"OK", "ERR_STATE"}
    losers = [r for r in results if r.status != "OK"]
    assert all(r.card is not None and r.card.state is CardState.APPROVED for r in losers)
    outbox = sum([await redis.xlen(key) for key in ledger.outbox_keys()])
    assert outbox == 1


async def test_approve_reject_race_has_one_winner(redis: Redis) -> None:
    """An approval and two rejections racing: exactly one decision applies, the others see it."""
    ledger = RedisLedger(redis)
    for i in range(10):
        card_id = await _pending(ledger, dedupe_key=f"race-{i}")
        results = await asyncio.gather(
            ledger.approve(card_id, approver="bob@acme.example", version=1, args_hash="h1", comment=""),
            ledger.reject(card_id, admin="carol@acme.example", reason="no"),
            ledger.reject(card_id, admin="dave@acme.example", reason="no"),
        )
        assert [r.status for r in results].count("OK") == 1
        final = await ledger.get(card_id)
        assert final is not None and final.state in {CardState.APPROVED, CardState.REJECTED}
        assert all(r.card is not None and r.card.state is final.state for r in results if r.status != "OK")


async def test_cancel_racing_claims_never_lets_a_cancelled_card_execute(redis: Redis) -> None:
    """Cancel and claim race on an approved card: either it is cancelled and never claimed, or claimed first."""
    ledger = RedisLedger(redis)
    for i in range(10):
        card_id = await _approved(ledger, dedupe_key=f"cancel-{i}")
        cancel, *claims = await asyncio.gather(
            ledger.cancel(card_id, actor="alice@acme.example"),
            *(ledger.claim(card_id, worker=f"w{n}", lease_ms=5000) for n in range(3)),
        )
        claimed = [c for c in claims if c.status == "OK"]
        assert len(claimed) + (cancel.status == "OK") == 1
        final = await ledger.get(card_id)
        assert final is not None
        assert final.state is (CardState.CANCELLED if cancel.status == "OK" else CardState.EXECUTING)


async def test_due_gathers_the_timers_of_every_shard_within_the_window(redis: Redis) -> None:
    """One sweep's question sees the due timers of every shard, `limit` of each, and none outside the window."""
    ledger = RedisLedger(redis)
    decide_ms = 9 * 86_400_000 + 4_321  # a deadline no other test's cards share
    now = await ledger.server_time_ms()
    # A requester's cards share its shard: 24 requesters spread them (all in one shard: odds of 8**-23).
    ids = {await _pending(ledger, decide_within_ms=decide_ms, requester_subject=f"due{n}@acme.example",
                          dedupe_key=f"due-window-{now}-{n}") for n in range(24)}  # fmt: skip
    shards = {card_shard(card_id) for card_id in ids}
    assert len(shards) > 1
    start, end = now + decide_ms - 60_000, now + decide_ms + 60_000
    assert set(await ledger.due(now_ms=end, from_ms=start)) == ids
    first = await ledger.due(now_ms=end, from_ms=start, limit=1)
    assert set(first) <= ids and {card_shard(card_id) for card_id in first} == shards and len(first) == len(shards)
    assert not set(await ledger.due(now_ms=start, from_ms=now)) & ids  # not due yet


async def test_expiry_racing_approval_has_one_winner(redis: Redis) -> None:
    """At the deadline, the sweep and a late approval cannot both win."""
    ledger = RedisLedger(redis)
    card_id = await _pending(ledger, decide_within_ms=20)
    with anyio.fail_after(5):
        while not await ledger.due(now_ms=await ledger.server_time_ms()):
            await anyio.sleep(0.005)
    sweep, approve = await asyncio.gather(
        ledger.sweep_open(card_id, requeue_ms=1000),
        ledger.approve(card_id, approver="bob@acme.example", version=1, args_hash="h1", comment=""),
    )
    final = await ledger.get(card_id)
    assert final is not None and final.state is CardState.EXPIRED
    assert approve.status in {"ERR_EXPIRED", "ERR_STATE"}


async def test_self_approval_stale_version_and_wrong_hash_are_refused(redis: Redis) -> None:
    """The requester cannot approve; an approval must name the version and args_hash it saw."""
    ledger = RedisLedger(redis)
    card_id = await _pending(ledger)
    card = await ledger.get(card_id)
    assert card is not None
    own = await ledger.approve(card_id, approver="alice@acme.example", version=1, args_hash="h1", comment="")
    stale = await ledger.approve(card_id, approver="bob@acme.example", version=0, args_hash="h1", comment="")
    wrong = await ledger.approve(card_id, approver="bob@acme.example", version=1, args_hash="h2", comment="")
    assert (own.status, stale.status, wrong.status) == ("ERR_SELF_APPROVAL", "ERR_STALE", "ERR_STALE")
    after = await ledger.get(card_id)
    assert after is not None and after.version == card.version and after.state is CardState.PENDING


async def test_quorum_needs_two_distinct_approvers(redis: Redis) -> None:
    """With two required, one approval records; the same admin again is refused; a second approves."""
    ledger = RedisLedger(redis)
    card_id = await _pending(ledger, approvals_required=2)
    first = await ledger.approve(card_id, approver="bob@acme.example", version=1, args_hash="h1", comment="")
    assert first.card is not None and first.card.state is CardState.PENDING and first.card.version == 2
    twice = await ledger.approve(card_id, approver="bob@acme.example", version=2, args_hash="h1", comment="")
    assert twice.status == "ERR_DUPLICATE_APPROVER"
    second = await ledger.approve(card_id, approver="carol@acme.example", version=2, args_hash="h1", comment="")
    assert second.card is not None and second.card.state is CardState.APPROVED
    assert second.card.approvers == ("bob@acme.example", "carol@acme.example")


async def test_undecided_card_expires_by_the_redis_clock(redis: Redis) -> None:
    """Past its deadline a card cannot be approved; the sweep moves it to EXPIRED."""
    ledger = RedisLedger(redis)
    card_id = await _pending(ledger, decide_within_ms=50)
    with anyio.fail_after(5):
        while not await ledger.due(now_ms=await ledger.server_time_ms()):
            await anyio.sleep(0.01)
    late = await ledger.approve(card_id, approver="bob@acme.example", version=1, args_hash="h1", comment="")
    assert late.status == "ERR_EXPIRED" and late.card is not None and late.card.state is CardState.EXPIRED
    fresh = await ledger.propose(PROPOSAL)  # an expired card no longer deduplicates
    assert fresh.status == "OK"


async def test_a_replayed_transition_changes_nothing(redis: Redis) -> None:
    """The same transition id twice: the second answers ALREADY_APPLIED, one event, one version."""
    ledger = RedisLedger(redis)
    card_id = await _pending(ledger)
    first = await ledger._replay("approve", card_id, "tid-1", "bob@acme.example", 1, "h1", "", 10_000)
    again = await ledger._replay("approve", card_id, "tid-1", "bob@acme.example", 1, "h1", "", 10_000)
    assert (first.status, again.status) == ("OK", "ALREADY_APPLIED")
    events = await ledger.events(card_id)
    assert [e.type for e in events] == ["created", "approved"] and verify_chain(events)
    assert again.card is not None and again.card.version == 2


async def test_tampered_event_breaks_the_chain(redis: Redis) -> None:
    """Rewriting any stored event is detected by the chain check."""
    ledger = RedisLedger(redis)
    card_id = await _approved(ledger)
    events = await ledger.events(card_id)
    assert verify_chain(events)
    forged = [events[0], replace(events[1], actor="mallory@acme.example")]
    assert not verify_chain(forged)


async def test_claim_dispatch_complete_uses_fences(redis: Redis) -> None:
    """One claim wins; dispatch needs the fence; a stale fence's result is recorded, not applied."""
    ledger = RedisLedger(redis)
    card_id = await _approved(ledger)
    claims = await asyncio.gather(*(ledger.claim(card_id, worker=f"w{i}", lease_ms=5000) for i in range(5)))
    [winner] = [c for c in claims if c.status == "OK"]
    assert winner.card is not None and winner.card.state is CardState.EXECUTING
    fence = winner.card.fence
    assert (await ledger.dispatch(card_id, fence=fence - 1)).status == "ERR_FENCE"
    assert (await ledger.dispatch(card_id, fence=fence)).status == "OK"
    late = await ledger.complete(card_id, fence=fence + 7, outcome=CardState.FAILED, reference="", evidence={},
                                 settle_ms=100)  # fmt: skip
    assert late.status == "ERR_FENCE"
    done = await ledger.complete(card_id, fence=fence, outcome=CardState.SUCCEEDED, reference="bk-1", evidence={},
                                 settle_ms=100)  # fmt: skip
    assert done.card is not None and done.card.state is CardState.SUCCEEDED and done.card.reference == "bk-1"
    after = await ledger.complete(card_id, fence=fence, outcome=CardState.FAILED, reference="", evidence={},
                                  settle_ms=100)  # fmt: skip
    assert after.status == "ERR_FENCE" and after.card is not None and after.card.state is CardState.SUCCEEDED
    types = [e.type for e in await ledger.events(card_id)]
    assert types.count("late_result_ignored") == 2


async def test_lost_lease_before_dispatch_goes_back_to_approved_and_after_dispatch_to_unknown(redis: Redis) -> None:
    """A worker that never sent is safe to redo; one that may have sent leads to a status query."""
    ledger = RedisLedger(redis)
    quiet = await _approved(ledger, dedupe_key="quiet")
    sent = await _approved(ledger, dedupe_key="sent")
    q = await ledger.claim(quiet, worker="w1", lease_ms=30)
    # Long enough to dispatch within it on a loaded machine; the recovery below waits for it to end.
    s = await ledger.claim(sent, worker="w1", lease_ms=500)
    assert q.card is not None and s.card is not None
    assert (await ledger.dispatch(sent, fence=s.card.fence)).status == "OK"
    with anyio.fail_after(5):
        while (await ledger.recover(quiet)).status == "NOT_DUE":
            await anyio.sleep(0.01)
        while (recovered := await ledger.recover(sent)).status == "NOT_DUE":
            await anyio.sleep(0.01)
    assert recovered.card is not None and recovered.card.state is CardState.UNKNOWN
    back = await ledger.get(quiet)
    assert back is not None and back.state is CardState.APPROVED
    assert back.idempotency_key == q.card.idempotency_key  # the key is never regenerated
    # The old holder's late dispatch is fenced off.
    assert (await ledger.dispatch(quiet, fence=q.card.fence)).status in {"ERR_STATE", "ERR_FENCE"}


async def test_terminal_states_never_change(redis: Redis) -> None:
    """A rejected card cannot be approved, cancelled, claimed or completed."""
    ledger = RedisLedger(redis)
    card_id = await _pending(ledger)
    assert (await ledger.reject(card_id, admin="bob@acme.example", reason="no")).status == "OK"
    attempts = [
        await ledger.approve(card_id, approver="carol@acme.example", version=2, args_hash="h1", comment=""),
        await ledger.cancel(card_id, actor="alice@acme.example"),
        await ledger.claim(card_id, worker="w", lease_ms=1000),
        await ledger.reconcile(card_id, result="SUCCEEDED", reference="", evidence={}),
    ]
    assert [a.status for a in attempts] == ["ERR_STATE"] * 4
    card = await ledger.get(card_id)
    assert card is not None and card.state is CardState.REJECTED and card.rejection["reason"] == "no"


async def test_malformed_card_ids_are_not_found_without_touching_redis(redis: Redis) -> None:
    """Ids the ledger never minted answer NOT_FOUND."""
    ledger = RedisLedger(redis)
    for bogus in ("crd_99_" + "0" * 32, "../x", "crd_1_zz"):
        assert (await ledger.approve(bogus, approver="b", version=1, args_hash="", comment="")).status == (
            "ERR_NOT_FOUND"
        )
        assert await ledger.get(bogus) is None


async def test_per_org_and_per_requester_indexes_find_cards_under_any_load_of_others(redis: Redis) -> None:
    """An org's and a requester's cards are found however many cards other orgs filed since."""
    ledger = RedisLedger(redis)
    mine = await _pending(ledger, dedupe_key="mine")
    for i in range(30):
        await _pending(
            ledger, dedupe_key=f"other-{i}", requester_org="globex", requester_subject=f"g{i}@globex.example"
        )
    assert [card.card_id for card in await ledger.recent(limit=5, org="acme")] == [mine]
    assert [c.card_id for c in await ledger.recent(limit=5, requester=("acme", "alice@acme.example"))] == [mine]
    assert await ledger.recent(limit=5, requester=("acme", "bob@acme.example")) == []
    assert len(await ledger.recent(limit=5, org="globex")) == 5


CARD_BYTES_BOUND = 32 * 1024
"""A card's stored size may not pass this, however long it waits (its history is bounded)."""


def _card_key(card_id: str) -> str:
    shard = card_shard(card_id)
    assert shard is not None
    return RedisLedger._keys(card_id, shard)[0]


async def _stored_bytes(redis: Redis, card_id: str) -> int:
    return int(await redis.strlen(_card_key(card_id)))


@pytest.mark.slow
async def test_an_approved_card_requeued_thousands_of_times_stays_small(redis: Redis) -> None:
    """An approved card waiting for a backend that stays down is requeued by the sweeper every 10 s:
    3,000 sweeps (over eight hours) leave it under a fixed size, with a verifiable chain that counts them.
    Counting a repeat changes no hash: the chain after the first requeue is the chain after the last."""
    ledger = RedisLedger(redis)
    card_id = await _approved(ledger)
    assert (await ledger.sweep_open(card_id, requeue_ms=10_000)).status == "OK"
    after_one = await ledger.events(card_id)
    for _ in range(2999):
        assert (await ledger.sweep_open(card_id, requeue_ms=10_000)).status == "OK"
    assert await _stored_bytes(redis, card_id) < CARD_BYTES_BOUND
    assert await redis.memory_usage(_card_key(card_id)) < CARD_BYTES_BOUND
    events = await ledger.events(card_id)
    assert verify_chain(events)
    assert [e.type for e in events] == ["created", "approved", "requeued"] and events[-1].repeats == 2999
    assert [e.hash for e in events] == [e.hash for e in after_one]
    assert events[-1].last_at_ms is not None and events[-1].last_at_ms >= events[-1].at_ms
    card = await ledger.get(card_id)
    assert card is not None and card.version == 2 + 3000  # every sweep is still a transition of the card


@pytest.mark.slow
async def test_a_status_query_rescheduled_thousands_of_times_stays_small(redis: Redis) -> None:
    """A status query that keeps failing reschedules its card: 3,000 reschedules stay under the bound."""
    ledger = RedisLedger(redis)
    card_id = await _approved(ledger)
    claimed = await ledger.claim(card_id, worker="w1", lease_ms=60_000)
    assert claimed.card is not None
    assert (await ledger.dispatch(card_id, fence=claimed.card.fence)).status == "OK"
    await ledger.complete(card_id, fence=claimed.card.fence, outcome=CardState.UNKNOWN, reference="",
                          evidence={}, settle_ms=0)  # fmt: skip
    for _ in range(3000):
        rescheduled = await ledger.reconcile(
            card_id, result="RESCHEDULE", reference="", evidence={"reason": "status query failed"}, next_at_ms=0
        )
        assert rescheduled.status == "OK"
    assert await _stored_bytes(redis, card_id) < CARD_BYTES_BOUND
    events = await ledger.events(card_id)
    assert verify_chain(events) and events[-1].type == "status_checked" and events[-1].repeats == 2999


async def test_only_a_repeat_identical_but_for_its_time_is_counted(redis: Redis) -> None:
    """Status checks with new evidence are each recorded; only back-to-back identical ones are counted."""
    ledger = RedisLedger(redis)
    card_id = await _approved(ledger)
    claimed = await ledger.claim(card_id, worker="w1", lease_ms=60_000)
    assert claimed.card is not None
    await ledger.dispatch(card_id, fence=claimed.card.fence)
    await ledger.complete(card_id, fence=claimed.card.fence, outcome=CardState.UNKNOWN, reference="",
                          evidence={}, settle_ms=0)  # fmt: skip
    for reason in ("status query failed", "within settle period", "within settle period", "status query failed"):
        await ledger.reconcile(card_id, result="RESCHEDULE", reference="", evidence={"reason": reason}, next_at_ms=0)
    checks = [e for e in await ledger.events(card_id) if e.type == "status_checked"]
    assert [(e.data["evidence"]["reason"], e.repeats) for e in checks] == [
        ("status query failed", 0),
        ("within settle period", 1),
        ("status query failed", 0),
    ]


@pytest.mark.slow
async def test_a_card_that_cycles_thousands_of_times_keeps_a_bounded_verifiable_history(redis: Redis) -> None:
    """Claimed and released 1,500 times (3,000 events that never repeat back to back): the history keeps
    its first events and its latest ones, stays under the size bound, and its chain still verifies."""
    ledger = RedisLedger(redis)
    card_id = await _approved(ledger)
    for _ in range(1500):
        claimed = await ledger.claim(card_id, worker="w1", lease_ms=60_000)
        assert claimed.card is not None
        released = await ledger.release(card_id, fence=claimed.card.fence, reason="x", requeue_ms=10_000)
        assert released.status == "OK"
    assert await _stored_bytes(redis, card_id) < CARD_BYTES_BOUND
    events = await ledger.events(card_id)
    assert verify_chain(events) and len(events) == MAX_EVENTS
    assert [e.type for e in events[:2]] == ["created", "approved"] and events[-1].type == "released"
    assert events[-1].seq == 2 + 3000
    [marker] = [e for e in events if e.type == COMPACTED]
    assert marker is events[HEAD_EVENTS] and sum(marker.data["steps"].values()) == 3002 - (MAX_EVENTS - 1)


@pytest.mark.parametrize(
    "forge",
    [
        lambda events: [*events[:HEAD_EVENTS], *events[HEAD_EVENTS + 1 :]],  # the marker removed
        lambda events: [*events[:-1], replace(events[-1], actor="mallory@acme.example")],  # a kept event changed
        lambda events: [
            *events[:HEAD_EVENTS],
            replace(events[HEAD_EVENTS], data_raw=events[HEAD_EVENTS].data_raw.replace('"claimed":', '"claimed":1')),
            *events[HEAD_EVENTS + 1 :],
        ],  # the marker's count of what it replaced changed
        lambda events: [*events[: HEAD_EVENTS + 1], *events[HEAD_EVENTS + 2 :]],  # the event after the marker dropped
    ],
    ids=["marker-removed", "kept-event-changed", "marker-count-changed", "event-after-marker-dropped"],
)
async def test_tampering_with_a_compacted_history_breaks_the_chain(redis: Redis, forge: Any) -> None:
    """A compacted history is as checkable as a short one, for everything it still holds."""
    ledger = RedisLedger(redis)
    card_id = await _approved(ledger)
    for _ in range(40):
        claimed = await ledger.claim(card_id, worker="w1", lease_ms=60_000)
        assert claimed.card is not None
        await ledger.release(card_id, fence=claimed.card.fence, reason="x", requeue_ms=10_000)
    events = await ledger.events(card_id)
    assert verify_chain(events) and events[HEAD_EVENTS].type == COMPACTED
    assert not verify_chain(forge(events))


async def test_only_the_latest_transition_ids_are_kept_and_a_retry_is_still_recognised(redis: Redis) -> None:
    """Replay protection keeps the ids of the latest transitions: a retry right after its call answers
    ALREADY_APPLIED, and thousands of sweeps leave a fixed number of ids on the card."""
    ledger = RedisLedger(redis)
    card_id = await _approved(ledger)
    first = await ledger._replay("sweep_open", card_id, "tid-sweep", 10_000, card_id)
    again = await ledger._replay("sweep_open", card_id, "tid-sweep", 10_000, card_id)
    assert (first.status, again.status) == ("OK", "ALREADY_APPLIED")
    for _ in range(500):
        await ledger.sweep_open(card_id, requeue_ms=10_000)
    stored = decode_card(await redis.get(_card_key(card_id)), card_id)
    assert len(stored["applied"]) == MAX_APPLIED


async def test_a_card_stored_with_every_applied_id_still_recognises_them_and_is_bounded_at_its_next_step(
    redis: Redis,
) -> None:
    """A card written before the ids were bounded held a map of every id: a retry of one of them is still
    ALREADY_APPLIED, and the card's next transition replaces the map by the bounded list."""
    ledger = RedisLedger(redis)
    card_id = await _approved(ledger)
    stored = decode_card(await redis.get(_card_key(card_id)), card_id)
    stored["applied"] = {f"old-{n}": "requeued" for n in range(1000)} | {"tid-old": "approved"}
    await redis.set(_card_key(card_id), json.dumps(stored))
    again = await ledger._replay("approve", card_id, "tid-old", "bob@acme.example", 2, "h1", "", 10_000)
    assert again.status == "ALREADY_APPLIED" and again.extra["original"] == "approved"
    assert (await ledger.sweep_open(card_id, requeue_ms=10_000)).status == "OK"
    assert len(decode_card(await redis.get(_card_key(card_id)), card_id)["applied"]) == 1


async def test_the_ledger_hands_a_card_resent_as_often_as_its_contract_allows_to_a_person(redis: Redis) -> None:
    """The resend cap is held by the claim script itself, whatever a worker decided: an UNKNOWN card sent twice
    (one resend) is claimed again under a cap of two, and handed over (NEEDS_RECONCILIATION) under a cap of one."""
    ledger = RedisLedger(redis)
    card_id = await _approved(ledger)
    for resend in (False, True):
        claim = await (ledger.claim_resend(card_id, worker="w1", lease_ms=5000, max_resends=2) if resend
                       else ledger.claim(card_id, worker="w1", lease_ms=5000))  # fmt: skip
        assert claim.card is not None and claim.status == "OK"
        assert (await ledger.dispatch(card_id, fence=claim.card.fence)).ok
        unknown = await ledger.complete(card_id, fence=claim.card.fence, outcome=CardState.UNKNOWN, reference="",
                                        evidence={}, settle_ms=0)  # fmt: skip
        assert unknown.ok
    capped = await ledger.claim_resend(card_id, worker="w1", lease_ms=5000, max_resends=1)
    assert capped.status == "ERR_QUOTA_EXCEEDED" and capped.card is not None
    assert capped.card.state is CardState.NEEDS_RECONCILIATION and capped.card.attempts == 2
    assert "cap" in capped.card.evidence["reason"]
    events = await ledger.events(card_id)
    assert events[-1].type == "handed_over" and verify_chain(events)
