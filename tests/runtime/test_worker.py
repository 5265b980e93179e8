"""The worker's loops, driven step by step on a database no other worker drains."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import anyio
import pytest
from redis.asyncio import Redis

from gateway.cards.card import CardState, verify_chain
from gateway.errors import ToolDeclarationError
from gateway.runtime.app import Gateway, build_gateway, tools_for
from gateway.runtime.worker import Worker
from gateway.store.keys import KeyStore
from gateway.telemetry.metrics import REGISTRY
from tests.support.agents import make_key
from tests.support.cards import PROPOSAL, approved_card
from tests.support.services import Backend, gateway_settings, in_process_gateway

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", name="redis_url")
def worker_database(quiet_redis_url: str) -> str:
    """A database no worker drains (see conftest)."""
    return quiet_redis_url


@pytest.fixture
async def gateway(redis: Redis, redis_url: str, backends: dict[str, Backend]) -> AsyncIterator[Gateway]:
    async with in_process_gateway(gateway_settings(redis_url, backends)) as wired:
        yield wired


async def _approved_booking(gateway: Gateway, redis: Redis, day: str) -> str:
    token = await make_key(redis, roles=("staff",))
    principal = await KeyStore(redis).resolve(token)
    assert principal is not None
    arguments = {"room_id": "room-cirrus", "date": day, "start": "15:00", "end": "16:00", "title": "Sync"}
    # A short requeue interval, so a lost outbox entry is noticed within the test.
    card = await approved_card(gateway, principal, "rooms_book", arguments, requeue_ms=100)
    return card.card_id


async def test_an_approved_card_whose_outbox_entry_was_lost_is_requeued_and_runs_once(
    gateway: Gateway, redis: Redis
) -> None:
    """The sweeper re-enqueues an approved card nobody claimed; the claim keeps it to one run."""
    card_id = await _approved_booking(gateway, redis, "2026-12-23")
    await gateway.ledger.ensure_outbox_group()
    for key in gateway.ledger.outbox_keys():  # lose every outbox entry
        await redis.xtrim(key, maxlen=0)
    worker = Worker(gateway.executor.writes, gateway.ledger, block_ms=50, requeue_ms=100)
    assert await worker.consume_once() == 0
    with anyio.fail_after(10):
        while (card := await gateway.ledger.get(card_id)) is not None and card.state is CardState.APPROVED:
            await worker.sweep_once()
            await worker.consume_once()
    assert card is not None and card.state is CardState.SUCCEEDED
    types = [e.type for e in await gateway.ledger.events(card_id)]
    assert "requeued" in types and types.count("dispatched") == 1


async def test_duplicate_outbox_entries_never_run_a_card_twice(gateway: Gateway, redis: Redis) -> None:
    """Replayed outbox entries are harmless: only one claim can win."""
    card_id = await _approved_booking(gateway, redis, "2026-12-24")
    await gateway.ledger.ensure_outbox_group()
    for key in gateway.ledger.outbox_keys():
        if await redis.xlen(key):
            for _ in range(3):
                await redis.xadd(key, {"card_id": card_id})
    workers = [Worker(gateway.executor.writes, gateway.ledger, name=f"w{i}", block_ms=50) for i in range(3)]
    with anyio.fail_after(10):
        while sum([await w.consume_once() for w in workers]):
            pass
    card = await gateway.ledger.get(card_id)
    assert card is not None and card.state is CardState.SUCCEEDED
    assert [e.type for e in await gateway.ledger.events(card_id)].count("dispatched") == 1


async def test_an_approved_card_not_run_within_its_window_expires(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """Past execute_by, an approved card expires instead of running late."""
    settings = replace(gateway_settings(redis_url, backends), run_worker=False)
    tools = [tool for tool in tools_for(settings) if tool.name != "rooms_book"]
    [book] = [tool for tool in tools_for(settings) if tool.name == "rooms_book"]
    assert book.approval is not None
    quick = replace(book, approval=replace(book.approval, execute_within_seconds=0.05))
    gateway = build_gateway(settings, [*tools, quick])
    try:
        card_id = await _approved_booking(gateway, redis, "2026-12-25")
        worker = Worker(gateway.executor.writes, gateway.ledger, block_ms=10)
        with anyio.fail_after(5):
            while (card := await gateway.ledger.get(card_id)) is not None and card.state is CardState.APPROVED:
                await anyio.sleep(0.02)
                await worker.sweep_once()
        assert card is not None and card.state is CardState.EXPIRED
        assert await worker.consume_once() >= 0
        after = await gateway.ledger.get(card_id)
        assert after is not None and after.state is CardState.EXPIRED  # a late claim cannot revive it
    finally:
        await gateway.aclose()


async def test_an_unknown_write_whose_status_query_keeps_failing_goes_to_a_person_at_the_horizon(
    redis: Redis, redis_url: str, clean_backends: dict[str, Backend]
) -> None:
    """The backend answers 503 to the send and to every status query: the card is asked about again
    until the reconciliation horizon, then it is NEEDS_RECONCILIATION for an admin, never rescheduled forever."""
    settings = replace(gateway_settings(redis_url, clean_backends), run_worker=False, reconcile_horizon_seconds=3.0)
    gateway = build_gateway(settings, tools_for(settings))
    try:
        card_id = await _approved_booking(gateway, redis, "2026-12-26")
        clean_backends["rooms"].set_faults(status=503, paths=["/bookings", "/idempotency"])
        worker = Worker(gateway.executor.writes, gateway.ledger, block_ms=50)
        with anyio.fail_after(15):
            while (card := await gateway.ledger.get(card_id)) is None or card.state is not CardState.UNKNOWN:
                await worker.consume_once()
            while (card := await gateway.ledger.get(card_id)) is not None and card.state is CardState.UNKNOWN:
                await anyio.sleep(0.05)
                await worker.sweep_once()
        assert card is not None and card.state is CardState.NEEDS_RECONCILIATION
        assert "first send" in card.evidence["reason"]
        events = await gateway.ledger.events(card_id)
        assert [e.type for e in events].count("dispatched") == 1  # handed over, never resent on no answer
        checks = [e for e in events if e.type == "status_checked"]
        assert checks and all(e.data["evidence"]["reason"] == "status query failed" for e in checks)
        assert verify_chain(events)
    finally:
        await gateway.aclose()


@pytest.mark.parametrize("lease_seconds", [5.0, 10.0, 15.0])
def test_a_gateway_whose_lease_a_write_tool_could_outlast_is_refused_at_construction(
    redis_url: str, backends: dict[str, Backend], lease_seconds: float
) -> None:
    """rooms_book may take 10 s: a lease not longer than that plus the margin could run out mid-send
    and let another worker resend it, so such a gateway is never built."""
    settings = replace(gateway_settings(redis_url, backends), lease_seconds=lease_seconds)
    with pytest.raises(ToolDeclarationError) as refused:
        build_gateway(settings, tools_for(settings))
    assert refused.value.code == "timeout_exceeds_lease" and refused.value.tool in {
        "rooms_book",
        "rooms_cancel_booking",
    }


async def test_an_unknown_write_whose_tool_is_no_longer_served_goes_to_a_person_and_is_audited(
    gateway: Gateway, redis: Redis
) -> None:
    """No status query is possible without the tool: the card is handed over, and the audit says why."""
    ledger = gateway.ledger
    created = await ledger.propose(replace(PROPOSAL, tool="gone_write", dedupe_key="gone"))
    assert created.card is not None
    card_id = created.card.card_id
    assert (await ledger.approve(card_id, approver="bob@acme.example", version=1, args_hash="h1", comment="")).ok
    claimed = await ledger.claim(card_id, worker="w1", lease_ms=5000)
    assert claimed.card is not None
    assert (await ledger.dispatch(card_id, fence=claimed.card.fence)).ok
    done = await ledger.complete(card_id, fence=claimed.card.fence, outcome=CardState.UNKNOWN, reference="",
                                 evidence={}, settle_ms=0)  # fmt: skip
    assert done.card is not None and done.card.state is CardState.UNKNOWN

    handed_over = {"outcome": "NEEDS_RECONCILIATION"}
    before = REGISTRY.get_sample_value("countersign_execution_latency_seconds_count", handed_over) or 0.0

    settled = await gateway.executor.writes.reconcile(card_id, worker="w1")

    assert settled is not None and settled.state is CardState.NEEDS_RECONCILIATION
    assert REGISTRY.get_sample_value("countersign_execution_latency_seconds_count", handed_over) == before + 1
    events = await gateway.audit.recent(20)
    assert any(
        (e.action, e.outcome, e.tool, e.reason)
        == ("card.reconcile", "NEEDS_RECONCILIATION", "gone_write", "tool no longer served")  # fmt: skip
        for e in events
    )


async def test_a_write_the_backend_answers_429_is_released_with_its_key_and_sent_after_the_retry_after(
    gateway: Gateway, redis: Redis, clean_backends: dict[str, Backend]
) -> None:
    """A 429 means the backend did not process the write: the card goes back to APPROVED (not UNKNOWN,
    no status query), is due again only after the backend's Retry-After, and the next send, with the
    same key, applies it once."""
    card_id = await _approved_booking(gateway, redis, "2026-12-26")
    clean_backends["rooms"].set_faults(status=429, retry_after=30, paths=["/bookings"], times=1)
    released = await gateway.executor.writes.run_approved(card_id, worker="w1")
    assert released is not None and released.state is CardState.APPROVED
    now = await gateway.ledger.server_time_ms()
    assert card_id not in await gateway.ledger.due(now_ms=now + 25_000)
    assert card_id in await gateway.ledger.due(now_ms=now + 31_000)
    done = await gateway.executor.writes.run_approved(card_id, worker="w1")
    assert done is not None and done.state is CardState.SUCCEEDED
    assert done.idempotency_key == released.idempotency_key
    types = [e.type for e in await gateway.ledger.events(card_id)]
    assert types.count("dispatched") == 2 and "released" in types
