"""Adapter health: a backend that fails its checks fails reads fast, and its approved cards wait."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from redis.asyncio import Redis

from gateway.cards.card import CardState
from gateway.ops.health import AdapterHealth
from gateway.outbound.backend_client import AiohttpUpstream
from gateway.registry.manifest import AdapterManifest
from gateway.runtime.app import Gateway
from gateway.store.keys import KeyStore
from tests.support.agents import make_key
from tests.support.cards import PROPOSAL, approve
from tests.support.planted import serve_planted
from tests.support.redis_server import free_port
from tests.support.services import Backend, gateway_settings, in_process_gateway

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", name="redis_url")
def health_database(quiet_redis_url: str) -> str:
    """A database no worker drains (see conftest)."""
    return quiet_redis_url


@pytest.fixture
async def gateway(redis: Redis, redis_url: str, backends: dict[str, Backend]) -> AsyncIterator[Gateway]:
    """A gateway whose rooms backend is down (nothing listens on its port)."""
    settings = gateway_settings(redis_url, backends)
    dead = replace(settings.adapters["rooms"], url=f"http://127.0.0.1:{free_port()}", timeout_seconds=5.0)
    async with in_process_gateway(replace(settings, adapters={**settings.adapters, "rooms": dead})) as wired:
        yield wired


async def test_an_unhealthy_backend_fails_reads_fast_and_its_approved_cards_wait(
    gateway: Gateway, redis: Redis
) -> None:
    """Two failed checks mark it unhealthy: reads answer UPSTREAM_UNAVAILABLE at once; cards stay APPROVED."""
    principal = await KeyStore(redis).resolve(await make_key(redis, roles=("staff",)))
    assert principal is not None
    assert gateway.health.healthy("rooms") and gateway.health.healthy("orders")
    await gateway.health.check_once()
    await gateway.health.check_once()
    assert not gateway.health.healthy("rooms") and gateway.health.healthy("orders")

    started = time.monotonic()
    envelope = await gateway.executor.agent.execute(principal, "rooms_list", {})
    assert envelope.code is not None and envelope.code.value == "UPSTREAM_UNAVAILABLE"
    assert time.monotonic() - started < 1.0  # not the backend's 5 s deadline
    assert not (await gateway.executor.agent.execute(principal, "orders_get", {"order_id": "ord-1001"})).is_error

    ledger = gateway.ledger
    card = await _approved_card(gateway)
    after = await gateway.executor.writes.run_approved(card, worker="w1")
    assert after is not None and after.state is CardState.APPROVED  # waits; never failed for an outage
    assert [e.type for e in await ledger.events(card)] == ["created", "approved"]
    deferred = [e for e in await gateway.audit.recent(10) if e.action == "card.execute"]
    assert [(e.outcome, e.reason) for e in deferred] == [("DEFERRED", "adapter rooms is unhealthy")]


async def _approved_card(gateway: Gateway) -> str:
    """rooms_book's preflight reads the backend, which is down: file the card through the ledger."""
    created = await gateway.ledger.propose(replace(PROPOSAL, dedupe_key="health"))
    assert created.card is not None
    approved = await approve(gateway.ledger, created.card.card_id)
    return approved.card_id


async def test_a_backend_with_an_interval_is_checked_no_more_often_than_it() -> None:
    """A registered adapter's ``health_interval_seconds`` (30 s unless it says otherwise) bounds what its health
    checks cost the API: three polls in a row ask it once; one without an interval is asked every time."""
    default = AdapterManifest.model_fields["health_interval_seconds"].default
    with serve_planted() as (url, backend):
        client = AiohttpUpstream(url, service="notes")
        paths = {"notes": "/ping", "other": "/pong"}
        try:
            health = AdapterHealth({"notes": client, "other": client}, paths, intervals={"notes": default})
            for _ in range(3):
                await health.check_once()
        finally:
            await client.aclose()
        assert default == 30.0
        assert backend.raw_paths.count(b"/ping") == 1 and backend.raw_paths.count(b"/pong") == 3
