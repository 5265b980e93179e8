"""Resending an UNKNOWN write, against a real backend and a real Redis, driven step by step.

A resend goes out with the card's key only after a status query found nothing. These tests hold
what a resend may conclude: its refusal proves nothing while the first send may still land, and it
never starts after the card's execute_by. The demo backend's fault switches hold, fail or refuse
requests; two `Worker` objects play two worker processes on a database no other worker drains.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from gateway.cards.card import Card, CardState, verify_chain
from gateway.config.settings import Settings
from gateway.runtime.app import Gateway, build_gateway, tools_for
from gateway.runtime.worker import Worker
from gateway.store.keys import KeyStore
from gateway.store.ledger.codec import decode_card
from gateway.store.ledger.redis_ledger import RedisLedger, card_shard
from tests.support.agents import make_key
from tests.support.cards import approved_card
from tests.support.services import Backend, gateway_settings, in_process_gateway

pytestmark = pytest.mark.anyio

FINAL = frozenset({CardState.SUCCEEDED, CardState.FAILED, CardState.NEEDS_RECONCILIATION, CardState.EXPIRED})


@pytest.fixture(scope="module", name="redis_url")
def resend_database(quiet_redis_url: str) -> str:
    """A database no worker drains (see conftest)."""
    return quiet_redis_url


def _settings(redis_url: str, backends: dict[str, Backend], *, backend_timeout: float = 10.0) -> Settings:
    """Test settings with no worker of their own, and a backend deadline long enough to hold a request."""
    settings = replace(gateway_settings(redis_url, backends), run_worker=False)
    adapters = {name: replace(a, timeout_seconds=backend_timeout) for name, a in settings.adapters.items()}
    return replace(settings, adapters=adapters)


@pytest.fixture
async def gateway(redis: Redis, redis_url: str, clean_backends: dict[str, Backend]) -> AsyncIterator[Gateway]:
    async with in_process_gateway(_settings(redis_url, clean_backends)) as wired:
        yield wired


async def _approved_booking(gateway: Gateway, redis: Redis, day: str) -> Card:
    token = await make_key(redis, roles=("staff",))
    principal = await KeyStore(redis).resolve(token)
    assert principal is not None
    arguments = {"room_id": "room-delta", "date": day, "start": "11:00", "end": "12:00", "title": "Resend"}
    approved = await approved_card(gateway, principal, "rooms_book", arguments)
    await gateway.ledger.ensure_outbox_group()
    return approved


async def _lease_runs_out(ledger: RedisLedger, redis: Redis, card_id: str) -> None:
    """What a worker stalled past its lease (a pause, a frozen VM) looks like to the ledger: the lease
    ends now by the Redis clock, and its timer is due. Waiting one out would take longer than the
    tool's timeout, which the gateway never lets a lease be shorter than."""
    shard = card_shard(card_id)
    assert shard is not None
    card_key, _, _, _, timers_key, *_ = RedisLedger._keys(card_id, shard)
    now = await ledger.server_time_ms()
    stored = decode_card(await redis.get(card_key), card_id)
    await redis.set(card_key, json.dumps(stored | {"lease_until_ms": str(now)}))
    await redis.zadd(timers_key, {card_id: now})


def _posts_with(backend: Backend, key: str) -> int:
    """How many booking requests carrying `key` reached the backend."""
    requests = list(backend.app.state.service.requests)
    return sum(1 for r in requests if r.path == "/bookings" and r.headers.get("idempotency-key") == key)


def _bookings(backend: Backend, day: str) -> list[Any]:
    service = backend.app.state.service
    return [b for b in service.bookings.values() if (b.room_id, b.date, b.status) == ("room-delta", day, "active")]


@pytest.mark.slow
async def test_a_refused_resend_while_the_first_send_is_still_in_flight_never_fails_the_card(
    gateway: Gateway, redis: Redis, clean_backends: dict[str, Backend]
) -> None:
    """The backend holds the first send; its worker stalls past the lease; another worker finds no record
    and resends, and the resend is refused with 409. Then the first send lands. The card must end
    SUCCEEDED with that booking: a resend's refusal leads to a status query, never to FAILED."""
    rooms = clean_backends["rooms"]
    card = await _approved_booking(gateway, redis, "2027-11-02")
    rooms.set_faults(latency_ms=6000, paths=["/bookings"], times=1)
    first = Worker(gateway.executor.writes, gateway.ledger, name="first", block_ms=50)
    second = Worker(gateway.executor.writes, gateway.ledger, name="second", block_ms=50)
    landed = anyio.Event()

    async def first_worker() -> None:
        await first.consume_once()
        landed.set()

    async with anyio.create_task_group() as group:
        group.start_soon(first_worker)
        with anyio.fail_after(10):
            while _posts_with(rooms, card.idempotency_key) == 0:
                await anyio.sleep(0.02)
        await _lease_runs_out(gateway.ledger, redis, card.card_id)
        rooms.set_faults(status=409, paths=["/bookings"], times=1)
        with anyio.fail_after(30):
            while (
                not landed.is_set() or (now := await gateway.ledger.get(card.card_id)) is None or now.state not in FINAL
            ):
                await second.sweep_once()
                await anyio.sleep(0.05)

    assert _posts_with(rooms, card.idempotency_key) >= 2  # the first send and at least one resend
    [booking] = _bookings(rooms, "2027-11-02")
    assert now.state is CardState.SUCCEEDED and now.reference == booking.booking_id
    events = await gateway.ledger.events(card.card_id)
    assert "claimed_for_resend" in [e.type for e in events]
    assert not [e for e in events if e.type == "completed" and e.data["outcome"] == "FAILED"]
    assert verify_chain(events)


async def test_a_resend_never_starts_after_the_cards_execute_by(
    redis: Redis, redis_url: str, clean_backends: dict[str, Backend]
) -> None:
    """The first send is answered 503 (UNKNOWN) and the status query finds no record. By the time a
    resend would be safe (after the settle period) the card's execute_by has passed: nothing more is
    sent, and the card goes to a person with the reason, never a late send."""
    rooms = clean_backends["rooms"]
    settings = _settings(redis_url, clean_backends)
    tools = tools_for(settings)
    [book] = [tool for tool in tools if tool.name == "rooms_book"]
    assert book.approval is not None and book.write_contract is not None
    # The first send goes out at once; the first safe resend, a settle period later, falls after execute_by.
    assert book.write_contract.settle_seconds > 1.9
    quick = replace(book, approval=replace(book.approval, execute_within_seconds=1.9))
    gateway = build_gateway(settings, [tool for tool in tools if tool is not book] + [quick])
    try:
        card = await _approved_booking(gateway, redis, "2027-11-03")
        rooms.set_faults(status=503, paths=["/bookings"], times=1)
        worker = Worker(gateway.executor.writes, gateway.ledger, block_ms=50)
        with anyio.fail_after(20):
            while (now := await gateway.ledger.get(card.card_id)) is None or now.state not in FINAL:
                await worker.consume_once()
                await worker.sweep_once()
        events = await gateway.ledger.events(card.card_id)
    finally:
        await gateway.aclose()
    assert _posts_with(rooms, card.idempotency_key) == 1  # the 503'd send, and no other
    assert now.state is CardState.NEEDS_RECONCILIATION and "execute_by" in now.evidence["reason"]
    assert _bookings(rooms, "2027-11-03") == []
    assert "claimed_for_resend" not in [e.type for e in events] and verify_chain(events)


async def test_a_write_whose_lookup_keeps_finding_nothing_is_resent_at_most_the_contracts_cap(
    redis: Redis, redis_url: str, clean_backends: dict[str, Backend]
) -> None:
    """Every send is answered 503 (UNKNOWN) and every status query finds no record. The card is resent with
    its key only as often as the contract's `max_resends` allows, each resend waiting twice as long as the
    one before, and then goes to a person: the card shows every send, numbered, and the backend saw no more.
    """
    rooms = clean_backends["rooms"]
    settings = _settings(redis_url, clean_backends)
    tools = tools_for(settings)
    [book] = [tool for tool in tools if tool.name == "rooms_book"]
    assert book.write_contract is not None
    # A short settle period keeps the doubling waits (0.05 s, 0.1 s, 0.2 s) quick; the cap is the point.
    capped = replace(book, write_contract=replace(book.write_contract, settle_seconds=0.05, max_resends=2))
    gateway = build_gateway(settings, [tool for tool in tools if tool is not book] + [capped])
    try:
        card = await _approved_booking(gateway, redis, "2027-11-04")
        rooms.set_faults(status=503, paths=["/bookings"])
        worker = Worker(gateway.executor.writes, gateway.ledger, block_ms=50)
        with anyio.fail_after(20):
            while (now := await gateway.ledger.get(card.card_id)) is None or now.state not in FINAL:
                await worker.consume_once()
                await worker.sweep_once()
                await anyio.sleep(0.02)
        events = await gateway.ledger.events(card.card_id)
    finally:
        rooms.clear_faults()
        await gateway.aclose()
    assert _posts_with(rooms, card.idempotency_key) == 3  # the first send and two resends
    assert now.state is CardState.NEEDS_RECONCILIATION and "allows 2 resends" in now.evidence["reason"]
    assert now.attempts == 3
    sends = [e for e in events if e.type == "dispatched"]
    assert [e.data["attempt"] for e in sends] == [1, 2, 3]
    # Exponential backoff: each resend waited at least twice the settle period of the send before it.
    gaps = [b.at_ms - a.at_ms for a, b in zip(sends, sends[1:], strict=False)]
    assert gaps[0] >= 50 and gaps[1] >= 100
    assert verify_chain(events)
