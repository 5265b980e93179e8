"""No durability window: once the ledger stops being durable, no card is acknowledged and no write is sent.

A real gateway under uvicorn, with its worker, on a server of its own (Redis 7.0 without WAITAOF, and
Valkey with it), serves a stream of proposals (the real MCP client) and approvals (the admin API) while
the demo rooms backend counts the bookings it makes. In the middle, one MULTI turns durability off
(``CONFIG SET appendonly no``, or an eviction policy) and reads every card in the same atomic step: a
snapshot of the ledger at the exact moment of the flip, in the server's own order of events. Then:

* no request sent after the flip returned is acknowledged (zero, not "few");
* every acknowledgement, even of a request in flight across the flip, is of a transition the
  snapshot already holds (the card existed; the approval was recorded);
* every booking the backend made before durability came back belongs to a card whose DISPATCHED the
  snapshot already holds: nothing was sent on a dispatch made after the flip;
* flipping back restores service without a restart: a new card is acknowledged, approved and run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.principal import KeyKind
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.ledger.codec import decode_card
from tests.support.agents import agent, make_key, payload
from tests.support.redis_server import SERVER_KINDS, has_redis_server, start_redis_process
from tests.support.services import Backend, gateway_settings
from tests.support.signing import ensure_signing_key

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KINDS = [
    pytest.param(kind, marks=pytest.mark.skipif(kind == "redis" and not has_redis_server(), reason="no redis-server"))
    for kind in SERVER_KINDS
]
FLIPS = {"appendonly": ("no", "yes"), "maxmemory-policy": ("allkeys-lru", "noeviction")}
ROOM = "room-atlas"
EXECUTED = {"SUCCEEDED", "FAILED", "UNKNOWN", "NEEDS_RECONCILIATION"}

# Every card of every shard (id, stored card), read inside the MULTI that flips durability: the ledger as it
# stood then.
_SNAPSHOT = """
local out = {}
for shard = 0, 7 do
  local tag = 'cs:{cs' .. shard .. '}'
  for _, org in ipairs(redis.call('SMEMBERS', tag .. ':orgs')) do
    for _, id in ipairs(redis.call('ZRANGE', tag .. ':org:' .. org, 0, -1)) do
      local raw = redis.call('GET', tag .. ':card:' .. id)
      if raw then out[#out + 1] = id; out[#out + 1] = raw end
    end
  end
end
return out
"""


@dataclass
class _Stream:
    """What the test's agent and admin were told, each with when its request was sent."""

    day: str
    flipped_at: float = float("inf")
    proposals: list[tuple[float, str]] = field(default_factory=list)
    """(sent at, card id) of each acknowledged proposal."""
    approvals: list[tuple[float, str]] = field(default_factory=list)
    """(sent at, card id) of each approval answered 200."""
    refused: dict[str, int] = field(default_factory=lambda: {"propose": 0, "approve": 0})
    queue: list[str] = field(default_factory=list)
    slot: int = 0
    running: bool = True

    def next_booking(self) -> dict[str, str]:
        minutes = 8 * 60 + self.slot * 5  # five-minute slots from 08:00, one per proposal
        self.slot += 1
        start, end = f"{minutes // 60:02d}:{minutes % 60:02d}", f"{(minutes + 5) // 60:02d}:{(minutes + 5) % 60:02d}"
        return {"room_id": ROOM, "date": self.day, "start": start, "end": end, "title": "durability"}


@pytest.fixture(params=KINDS)
def own_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    with start_redis_process(appendonly=True, server=request.param, appendfsync="always") as (url, _pid):
        yield request.param, url


async def _propose(stream: _Stream, client: Any) -> None:
    while stream.running and stream.slot < 100:  # the room closes at 18:00
        sent = time.monotonic()
        result = await client.call_tool("rooms_book", stream.next_booking())
        if result.is_error:
            stream.refused["propose"] += 1
        else:
            card_id = payload(result)["card_id"]
            stream.proposals.append((sent, card_id))
            stream.queue.append(card_id)
        await anyio.sleep(0.005)


async def _approve(stream: _Stream, http: httpx.AsyncClient) -> None:
    while stream.running:
        if not stream.queue:
            await anyio.sleep(0.01)
            continue
        card_id = stream.queue.pop(0)
        card = (await http.get(f"/cards/{card_id}")).json()["card"]
        sent = time.monotonic()
        answer = await http.post(f"/cards/{card_id}/approve", json={"version": card["version"],
                                                                   "args_hash": card["args_hash"]})  # fmt: skip
        if answer.status_code == 200:
            stream.approvals.append((sent, card_id))
        else:
            assert answer.status_code == 503, answer.text
            assert answer.headers["retry-after"] == "1"
            body = answer.json()
            assert body["error"]["code"] == "LEDGER_UNAVAILABLE"
            stream.refused["approve"] += 1
        await anyio.sleep(0.02)  # slower than the proposals: a backlog is waiting when durability goes


async def _worker_held_back(redis: Redis, card_id: str) -> bool:
    """Whether the worker audited that it left the card unsent (deferred, or released unsent)."""
    events = await RedisStreamAuditSink(redis).recent(200)
    held = ("DEFERRED", "NOT_SENT")
    return any(e.action == "card.execute" and e.extra.get("card_id") == card_id and e.outcome in held for e in events)


def _bookings(backend: Backend, day: str) -> set[tuple[str, str]]:
    service = backend.app.state.service
    return {(b.date, b.start) for b in list(service.bookings.values()) if b.date == day and b.room_id == ROOM}


@pytest.mark.parametrize("setting", sorted(FLIPS))
async def test_nothing_is_acknowledged_or_sent_once_the_ledger_is_not_durable_and_service_returns(
    own_server: tuple[str, str], backends: dict[str, Backend], setting: str
) -> None:
    """The flip is exact: zero acknowledgements after it, none of a transition it did not precede, no send
    on a dispatch after it; flipping back restores proposals, approvals and execution without a restart."""
    kind, url = own_server
    bad, good = FLIPS[setting]
    day = f"2034-{1 + SERVER_KINDS.index(kind) * 6 + sorted(FLIPS).index(setting):02d}-11"
    redis = Redis.from_url(url)
    stream = _Stream(day=day)
    try:
        token = await make_key(redis, roles=("staff",))
        admin = await make_key(redis, subject="bob@acme.example", kind=KeyKind.ADMIN, roles=("approver",))
        await ensure_signing_key(redis)
        with serve_app_in_thread(create_app(gateway_settings(url, backends)), lifespan=True) as base:
            headers = {"authorization": f"Bearer {admin}"}
            async with (
                agent(f"{base}/mcp", token) as client,
                httpx.AsyncClient(base_url=f"{base}/admin/api", headers=headers, timeout=10) as http,
            ):
                with anyio.fail_after(60):
                    async with anyio.create_task_group() as tasks:
                        tasks.start_soon(_propose, stream, client)
                        tasks.start_soon(_approve, stream, http)
                        while len(stream.approvals) < 5 or not _bookings(backends["rooms"], day):
                            await anyio.sleep(0.01)  # the stream is live: cards acknowledged, approved, run
                        async with redis.pipeline(transaction=True) as flip:
                            flip.config_set(setting, bad)
                            flip.eval(_SNAPSHOT, 0)
                            _, raw_cards = await flip.execute()
                        stream.flipped_at = time.monotonic()
                        # Proposals, approvals and the worker go on against it: for 1.5 s, and until both a
                        # proposal and an approval were tried and refused (on a loaded box a loop may lag).
                        while time.monotonic() - stream.flipped_at < 1.5 or not (
                            stream.refused["propose"] and stream.refused["approve"]
                        ):
                            await anyio.sleep(0.05)
                        made_while_not_durable = _bookings(backends["rooms"], day)
                        stream.running = False

                    pairs = zip(raw_cards[::2], raw_cards[1::2], strict=True)
                    snapshot = {(cid := card_id.decode()): decode_card(raw, cid) for card_id, raw in pairs}
                    late = [a for a in stream.proposals + stream.approvals if a[0] > stream.flipped_at]
                    assert late == []
                    assert {card_id for _, card_id in stream.proposals} <= set(snapshot)
                    for _, card_id in stream.approvals:
                        approvers = json.loads(snapshot[card_id]["approvers"])
                        assert "bob@acme.example" in approvers or snapshot[card_id]["state"] != "PENDING"
                    dispatched = {
                        (args["date"], args["start"])
                        for card in snapshot.values()
                        if card.get("dispatched") == "1" or card["state"] in EXECUTED
                        for args in [json.loads(card["arguments"])]
                    }
                    assert made_while_not_durable <= dispatched, made_while_not_durable - dispatched
                    assert stream.refused["propose"] > 0 and stream.refused["approve"] > 0  # it was tried

                    await redis.config_set(setting, good)
                    booking = stream.next_booking()
                    while (result := await client.call_tool("rooms_book", booking)).is_error:
                        await anyio.sleep(0.1)  # the pre-check re-reads the configuration within 0.5 s
                    card_id = payload(result)["card_id"]
                    card = (await http.get(f"/cards/{card_id}")).json()["card"]
                    approve = {"version": card["version"], "args_hash": card["args_hash"]}
                    assert (await http.post(f"/cards/{card_id}/approve", json=approve)).status_code == 200
                    while (await http.get(f"/cards/{card_id}")).json()["card"]["state"] != "SUCCEEDED":
                        await anyio.sleep(0.05)
                    assert (day, booking["start"]) in _bookings(backends["rooms"], day)
    finally:
        await redis.config_set(setting, good)
        await redis.aclose()


async def test_an_approval_not_confirmed_durable_is_answered_as_such_and_runs_once_durability_returns(
    own_server: tuple[str, str], backends: dict[str, Backend]
) -> None:
    """The admin is told "recorded but not confirmed" (503, retryable) with the card as the ledger holds it;
    nothing is sent while the ledger is not durable, and the approval, kept, runs once it is durable again."""
    kind, url = own_server
    redis = Redis.from_url(url)
    day = f"2034-{2 + SERVER_KINDS.index(kind) * 6:02d}-21"
    try:
        token = await make_key(redis, roles=("staff",))
        admin = await make_key(redis, subject="bob@acme.example", kind=KeyKind.ADMIN, roles=("approver",))
        await ensure_signing_key(redis)
        booking = {"room_id": ROOM, "date": day, "start": "09:00", "end": "10:00", "title": "durability"}
        with serve_app_in_thread(create_app(gateway_settings(url, backends)), lifespan=True) as base:
            headers = {"authorization": f"Bearer {admin}"}
            async with (
                agent(f"{base}/mcp", token) as client,
                httpx.AsyncClient(base_url=f"{base}/admin/api", headers=headers, timeout=10) as http,
            ):
                with anyio.fail_after(30):
                    card_id = payload(await client.call_tool("rooms_book", booking))["card_id"]
                    card = (await http.get(f"/cards/{card_id}")).json()["card"]
                    await redis.config_set("appendonly", "no")
                    review = {"version": card["version"], "args_hash": card["args_hash"]}
                    answer = await http.post(f"/cards/{card_id}/approve", json=review)
                    while not await _worker_held_back(redis, card_id):
                        await anyio.sleep(0.02)  # the worker has the approved card, and must not send it
                    sent_while_not_durable = _bookings(backends["rooms"], day)
                    await redis.config_set("appendonly", "yes")
                    while (await http.get(f"/cards/{card_id}")).json()["card"]["state"] != "SUCCEEDED":
                        await anyio.sleep(0.05)
        body = answer.json()
        assert answer.status_code == 503 and body["error"]["code"] == "LEDGER_UNAVAILABLE"
        assert "not confirmed durable" in body["error"]["message"] and "check the card" in body["error"]["message"]
        assert body["card"]["state"] == "APPROVED"  # the card as the ledger holds it: applied, not confirmed
        assert sent_while_not_durable == set()
        assert _bookings(backends["rooms"], day) == {(day, "09:00")}  # sent once, after durability returned
    finally:
        await redis.config_set("appendonly", "yes")
        await redis.aclose()
