"""Countersign on Redis Sentinel: the master dies mid-flow, the sentinels promote its replica, and
the gateway carries on without a restart; every approved card runs exactly once.

Real servers throughout (`tests.support.redis_topologies.sentinel_group`: one master, one replica,
three sentinels), a real uvicorn gateway with its worker, real MCP agents, the rooms backend. The
gateway requires each transition on one replica (`min_replicas = 1`): replication is asynchronous,
and without it an acknowledged transition could be lost with the master. So from the kill until the
old master is back (as the new master's replica) the gateway refuses writes, as it should: the
promoted server alone cannot confirm one.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterator

import anyio
import pytest

from backends.serve import serve_app_in_thread
from gateway.cards.card import Card, CardState
from gateway.cards.contract import TransitionStatus
from gateway.errors import StoreUnavailableError
from gateway.limits.budgets import Budget, Limits
from gateway.runtime.app import create_app
from gateway.store.client import connect
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.agents import agent, make_key, payload
from tests.support.redis_server import SERVER_KINDS, SERVER_PARAMS
from tests.support.redis_topologies import SentinelGroup, sentinel_group
from tests.support.services import Backend, gateway_settings
from tests.support.signing import ensure_signing_key

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CARDS = 20
KILL_AFTER = 8
"""Approvals acknowledged before the master is killed; the rest are made during and after the failover."""
GENEROUS = Limits(proposals=Budget(per_minute=60_000, burst=1_000), reads=Budget(per_minute=60_000, burst=1_000))
WITHIN_SECONDS = 120
"""Bound on the whole flow. Each transition waits for a replica's confirmation, on Valkey its fsync
(WAITAOF), and a rejoined replica confirms nothing until its AOF is rewritten after the full sync:
on a loaded 2-core machine the Valkey run has taken 60 s."""
FINAL = {CardState.SUCCEEDED, CardState.FAILED, CardState.NEEDS_RECONCILIATION}


@pytest.fixture(params=[param for param in SERVER_PARAMS if param.values[0] == "redis"])
def server_kind(request: pytest.FixtureRequest) -> str:
    """The test runs on a group of ``redis-server`` processes.

    Not on ``valkey-server`` (the Cluster tests are): there, after the failover, the rejoined replica
    confirmed nothing for anywhere from 40 s to more than 120 s on a quiet machine (every claim was
    released "not confirmed durable" meanwhile), so the run's length is not bounded. Until that is
    understood, a bound that passes would be a guess."""
    return str(request.param)


@pytest.fixture
def group(server_kind: str) -> Iterator[SentinelGroup]:
    with sentinel_group(server=server_kind) as running:
        yield running


def _day(index: int, server_kind: str) -> str:
    """A booking day of its own for each server kind (the rooms backend serves the whole session)."""
    first = datetime.date(2033, 1, 1) + datetime.timedelta(days=100 * SERVER_KINDS.index(server_kind))
    return (first + datetime.timedelta(days=index)).isoformat()


async def test_a_master_killed_mid_flow_loses_no_approved_card_and_runs_none_twice(
    group: SentinelGroup, backends: dict[str, Backend], server_kind: str
) -> None:
    """CARDS bookings proposed and approved one after another; the master is SIGKILLed after
    KILL_AFTER approvals. Every approval the ledger acknowledged survives on the promoted replica,
    every approved card ends SUCCEEDED, and the backend holds exactly one booking per card."""
    settings = dataclasses.replace(gateway_settings(group.url, backends), limits=GENEROUS, min_replicas=1,
                                   lease_seconds=16.0, redis_timeout_seconds=1.0)  # fmt: skip
    service = backends["rooms"].app.state.service
    before = {b.booking_id for b in service.bookings.values()}
    connection = connect(group.url, timeout=1.0)
    ledger = RedisLedger(connection.client, min_replicas=1)
    approved: list[str] = []
    promoted: list[int] = []
    try:
        token = await make_key(connection.client, subject="failover@acme.example")
        await ensure_signing_key(connection.client)
        with serve_app_in_thread(create_app(settings), lifespan=True) as base:
            with anyio.fail_after(WITHIN_SECONDS):
                async with anyio.create_task_group() as group_tasks:
                    for index in range(CARDS):
                        if index == KILL_AFTER:
                            old_master = group.kill_master()
                            group_tasks.start_soon(
                                anyio.to_thread.run_sync, _fail_over_and_rejoin, group, old_master, promoted
                            )
                        approved.append(
                            await _propose_and_approve(f"{base}/mcp", token, ledger, _day(index, server_kind))
                        )
                # The sentinels promoted another server. Not "the master now is another server": on a
                # loaded box a stalled new master can be failed over again, back to the rejoined one.
                assert promoted and promoted[0] != old_master
                cards = await _settled(ledger, approved)
    finally:
        await connection.aclose()
    assert [card.state for card in cards] == [CardState.SUCCEEDED] * CARDS
    new = [b for b in service.bookings.values() if b.booking_id not in before]
    assert sorted(b.booking_id for b in new) == sorted(card.reference for card in cards)  # one each, none twice


def _fail_over_and_rejoin(group: SentinelGroup, old_master: int, promoted: list[int]) -> None:
    """Wait for the sentinels to promote a replica (recording its port), then restart the old
    master as its replica."""
    promoted.append(group.wait_for_failover(old_master))
    group.rejoin(old_master)


async def _propose_and_approve(mcp_url: str, token: str, ledger: RedisLedger, day: str) -> str:
    """Propose a booking and approve it, retrying each step while the ledger is unavailable (the
    failover); returns the card id once the approval is acknowledged (durable on a replica)."""
    booking = {"room_id": "room-eos", "date": day, "start": "09:00", "end": "10:00", "title": "Failover"}
    while True:
        try:
            async with agent(mcp_url, token) as client:
                receipt = payload(await client.call_tool("rooms_book", booking))
        except Exception:  # noqa: BLE001 - the gateway answers 503 at its edge while Redis is away
            await anyio.sleep(0.2)
            continue
        if receipt.get("status") == "PENDING":
            break
        await anyio.sleep(0.2)  # LEDGER_UNAVAILABLE: the refusal is retryable
    card_id = str(receipt["card_id"])
    while True:
        try:
            card = await ledger.get(card_id)
            if card is not None and card.state is not CardState.PENDING:
                return card_id  # approved by an earlier attempt whose answer was lost
            assert card is not None
            result = await ledger.approve(card_id, approver="root@acme.example", version=card.version,
                                          args_hash=card.args_hash, comment="ok")  # fmt: skip
            if result.ok:
                return card_id
            assert result.status is TransitionStatus.ERR_NOT_DURABLE, result.status
        except StoreUnavailableError:
            pass
        await anyio.sleep(0.2)


async def _settled(ledger: RedisLedger, card_ids: list[str]) -> list[Card]:
    """The cards once every one is final (the caller bounds the wait)."""
    while True:
        try:
            cards = [await ledger.get(card_id) for card_id in card_ids]
        except StoreUnavailableError:
            cards = []
        final = [card for card in cards if card is not None and card.state in FINAL]
        if cards and len(final) == len(cards):
            return final
        await anyio.sleep(0.2)
