"""The live tool source against a real Redis: what it serves of the pinned manifests, under which lease."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from backends.expenses import expenses_manifest
from gateway.app import backend_client
from gateway.identity import IdentityHeaders
from gateway.registry.live import LiveToolSource
from gateway.store.registry import RegistryStore
from gateway.upstream import UpstreamClient
from tests.support.services import Backend
from tests.support.tools import read_tool

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", name="redis_url")
def live_source_database(quiet_redis_url: str) -> str:
    """A database no gateway reads its registry from (see conftest)."""
    return quiet_redis_url


@pytest.mark.parametrize(("lease_seconds", "served"), [(30.0, True), (15.0, False)])
async def test_a_pinned_adapter_whose_writes_could_outlast_this_gateways_lease_stays_out(
    redis: Redis, expenses: Backend, lease_seconds: float, served: bool
) -> None:
    """A manifest accepted under one lease is served by a gateway only if its writes (10 s here) fit
    that gateway's own lease with the margin; otherwise that adapter alone stays out, and the rest is served."""
    store = RegistryStore(redis)
    manifest = expenses_manifest(expenses.url)
    proposal = await store.propose("expenses", manifest, owner="expenses-svc", flags=[])
    assert proposal.proposed_hash is not None
    assert await store.accept("expenses", expected_hash=proposal.proposed_hash, admin="root@acme.example")
    clients: dict[str, UpstreamClient] = {}
    source = LiveToolSource(
        static=[read_tool()],
        store=store,
        clients=clients,
        make_client=backend_client,
        secrets={},
        identity=IdentityHeaders(),
        health_paths={},
        lease_seconds=lease_seconds,
    )
    try:
        await source.refresh()
        names = set(source.current())
    finally:
        for client in clients.values():
            await client.aclose()
    assert "demo_echo" in names
    assert ("expenses_submit" in names) is served and ("expenses_list" in names) is served
