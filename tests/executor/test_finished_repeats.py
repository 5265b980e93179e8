"""A repeat of a write that succeeded is answered with its finished card: real gateway, worker, backends, Redis."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import pytest
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.cards.card import CardState
from gateway.config.approvals import ApprovalSettings
from gateway.runtime.app import build_gateway, create_app, tools_for
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.keys import KeyStore
from gateway.store.ledger.layout import card_keys, open_buckets
from gateway.store.ledger.redis_ledger import RedisLedger, card_shard
from tests.support.agents import agent, error_code, make_key, payload
from tests.support.cards import PROPOSAL, approve, settled
from tests.support.services import Backend, gateway_settings, serve_backends

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", name="redis_url")
def repeats_database(redis_server_url: str) -> str:
    """A database of its own: this module's gateway and worker are the only ones on it."""
    return urlunsplit(urlsplit(redis_server_url)._replace(path="/7"))


@pytest.fixture(scope="module")
def backends() -> Iterator[dict[str, Backend]]:
    with serve_backends() as started:
        yield started


@pytest.fixture(scope="module")
def mcp_url(redis_url: str, backends: dict[str, Backend]) -> Iterator[str]:
    """A gateway with the default `[approvals]`: a repeat window of an hour."""
    assert ApprovalSettings().repeat_window_seconds == 3600
    with serve_app_in_thread(create_app(gateway_settings(redis_url, backends)), lifespan=True) as base:
        yield f"{base}/mcp"


def _refund(order: str, cents: int) -> dict[str, Any]:
    return {"order_id": order, "amount_cents": cents, "reason": "damaged"}


async def _propose(mcp_url: str, token: str, arguments: dict[str, Any]) -> dict[str, Any]:
    async with agent(mcp_url, token) as client:
        return payload(await client.call_tool("orders_refund_create", arguments))


async def test_a_repeat_after_success_gets_the_finished_card_and_nothing_is_written_twice(
    redis: Redis, mcp_url: str, backends: dict[str, Backend]
) -> None:
    """The same requester, tool and arguments (in another order) get the SUCCEEDED card: existing, with its outcome."""
    token = await make_key(redis, roles=("support",))
    first = await _propose(mcp_url, token, _refund("ord-1001", 700))
    await approve(RedisLedger(redis), first["card_id"])
    done = await settled(redis, first["card_id"])
    assert done.state is CardState.SUCCEEDED
    again = await _propose(mcp_url, token, {"reason": "damaged", "amount_cents": 700, "order_id": "ord-1001"})
    assert (again["card_id"], again["existing"], again["status"], again["outcome"]) == (
        first["card_id"], True, "SUCCEEDED", "succeeded",
    )  # fmt: skip
    assert again["reference"] == done.reference and again["note"].startswith("An identical write already succeeded")
    refunds = [r for r in backends["orders"].app.state.service.refunds if r.amount_cents == 700]
    assert len(refunds) == 1
    [audited] = [e for e in await RedisStreamAuditSink(redis).recent(100)
                 if e.action == "card.propose" and e.extra.get("existing") == "true"]  # fmt: skip
    assert (audited.extra["card_id"], audited.extra["state"]) == (first["card_id"], "SUCCEEDED")
    # Not identical: another amount, or another requester of the same org, files a card of its own.
    other_amount = await _propose(mcp_url, token, _refund("ord-1001", 701))
    colleague = await make_key(redis, roles=("support",), subject="kim@acme.example")
    other_requester = await _propose(mcp_url, colleague, _refund("ord-1001", 700))
    assert {other_amount["card_id"], other_requester["card_id"]}.isdisjoint({first["card_id"]})
    assert other_amount["status"] == other_requester["status"] == "PENDING"


async def test_a_repeat_after_a_failure_files_a_new_card(
    redis: Redis, mcp_url: str, backends: dict[str, Backend]
) -> None:
    """The backend refused the first send (409): FAILED, and the same request again is a new card to decide."""
    token = await make_key(redis, roles=("support",))
    first = await _propose(mcp_url, token, _refund("ord-1002", 800))
    backends["orders"].set_faults(status=409, paths=["/orders/ord-1002/refunds"], times=1)
    try:
        await approve(RedisLedger(redis), first["card_id"])
        assert (await settled(redis, first["card_id"])).state is CardState.FAILED
    finally:
        backends["orders"].clear_faults()
    again = await _propose(mcp_url, token, _refund("ord-1002", 800))
    assert again["card_id"] != first["card_id"] and again["status"] == "PENDING" and "existing" not in again


async def test_a_repeat_after_a_rejection_files_a_new_card(redis: Redis, mcp_url: str) -> None:
    token = await make_key(redis, roles=("support",))
    first = await _propose(mcp_url, token, _refund("ord-1002", 900))
    assert (await RedisLedger(redis).reject(first["card_id"], admin="root@acme.example", reason="no")).ok
    again = await _propose(mcp_url, token, _refund("ord-1002", 900))
    assert again["card_id"] != first["card_id"] and again["status"] == "PENDING" and "existing" not in again


@pytest.mark.parametrize("window", [0.0, 0.3], ids=["off", "lapsed"])
async def test_a_repeat_past_the_window_or_with_it_off_files_a_new_card(
    redis: Redis, redis_url: str, backends: dict[str, Backend], window: float
) -> None:
    """Past `repeat_window_seconds` after the success (by the Redis clock), or with it 0, a repeat is a new card."""
    settings = dataclasses.replace(gateway_settings(redis_url, backends),
                                   approvals=ApprovalSettings(repeat_window_seconds=window))  # fmt: skip
    gateway = build_gateway(settings, tools_for(settings))
    try:
        principal = await KeyStore(redis).resolve(await make_key(redis, roles=("support",)))
        assert principal is not None
        cents = 1_000 + int(window * 10)

        async def propose() -> dict[str, Any]:
            envelope = await gateway.executor.agent.execute(
                principal, "orders_refund_create", _refund("ord-1001", cents)
            )
            return envelope.for_model()  # type: ignore[no-any-return]

        first = await propose()
        await approve(RedisLedger(redis), first["card_id"])
        done = await settled(redis, first["card_id"])
        assert done.state is CardState.SUCCEEDED
        ledger = RedisLedger(redis)
        succeeded_at = (await ledger.events(done.card_id))[-1].at_ms
        with anyio.fail_after(5):
            while await ledger.server_time_ms() <= succeeded_at + int(window * 1000):
                await anyio.sleep(0.05)
        again = await propose()
    finally:
        await gateway.aclose()
    assert again["card_id"] != first["card_id"] and again["status"] == "PENDING" and "existing" not in again


async def test_lapsed_repeat_entries_are_pruned_by_later_proposals(quiet: Redis) -> None:
    """A succeeded card's dedupe entry outlives it only by its window: the next proposals in its shard remove it,
    and leave alone an entry the same dedupe key holds for a newer open card."""
    redis = quiet
    ledger = RedisLedger(redis, repeat_window_ms=1_000)
    finished = []
    for n in range(3):
        created = await ledger.propose(dataclasses.replace(PROPOSAL, dedupe_key=f"done-{n}"))
        assert created.card is not None
        finished.append(await _run(ledger, created.card.card_id))
    shard = card_shard(finished[0])
    assert shard is not None
    repeats_key = card_keys(finished[0], shard)[6]
    assert await redis.zcard(repeats_key) == 3 and len(await _dedupe_entries(redis, shard)) == 3
    now = await ledger.server_time_ms()
    with anyio.fail_after(5):
        while await ledger.server_time_ms() <= now + 1_000:
            await anyio.sleep(0.01)
    reopened = await ledger.propose(dataclasses.replace(PROPOSAL, dedupe_key="done-0"))  # a new card, same key
    assert reopened.status == "OK" and reopened.card is not None and reopened.card.card_id != finished[0]
    assert await redis.zcard(repeats_key) == 0
    [entry] = await _dedupe_entries(redis, shard)  # only the open card's entry is left
    assert entry.decode().startswith(reopened.card.card_id)


async def _dedupe_entries(redis: Redis, shard: int) -> list[bytes]:
    return [entry for key in open_buckets(shard) for entry in await redis.hvals(key)]


async def _run(ledger: RedisLedger, card_id: str) -> str:
    """Approve, claim, dispatch and complete a card as SUCCEEDED, by hand."""
    card = await ledger.get(card_id)
    assert card is not None
    assert (await ledger.approve(card_id, approver="root@acme.example", version=card.version,
                                 args_hash=card.args_hash, comment="")).ok  # fmt: skip
    claimed = await ledger.claim(card_id, worker="w1", lease_ms=60_000)
    assert claimed.card is not None
    assert (await ledger.dispatch(card_id, fence=claimed.card.fence)).ok
    done = await ledger.complete(card_id, fence=claimed.card.fence, outcome=CardState.SUCCEEDED, reference="r",
                                 evidence={}, settle_ms=0)  # fmt: skip
    assert done.card is not None and done.card.state is CardState.SUCCEEDED
    return card_id


async def test_a_repeat_of_a_booking_that_took_its_slot_gets_the_booking_not_a_refusal(
    redis: Redis, mcp_url: str, backends: dict[str, Backend]
) -> None:
    """The preview of the repeat finds the slot taken (by the booking it repeats): the agent gets that
    SUCCEEDED card; someone else's identical request is still refused as INFEASIBLE."""
    token = await make_key(redis, roles=("staff",))
    booking = {"room_id": "room-eos", "date": "2026-12-22", "start": "09:00", "end": "10:00", "title": "Planning"}
    async with agent(mcp_url, token) as client:
        first = payload(await client.call_tool("rooms_book", booking))
        await approve(RedisLedger(redis), first["card_id"])
        done = await settled(redis, first["card_id"])
        assert done.state is CardState.SUCCEEDED
        again = payload(await client.call_tool("rooms_book", booking))
    assert (again["card_id"], again["existing"], again["outcome"]) == (first["card_id"], True, "succeeded")
    colleague = await make_key(redis, roles=("staff",), subject="bob@acme.example")
    async with agent(mcp_url, colleague) as client:
        theirs = await client.call_tool("rooms_book", booking)
    assert error_code(theirs) == "INFEASIBLE"
    rooms = backends["rooms"].app.state.service
    assert len([b for b in rooms.bookings.values() if b.date == "2026-12-22" and b.status == "active"]) == 1
