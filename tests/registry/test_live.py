"""The live tool source against a real Redis: what it serves of the pinned manifests, under which lease."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pytest
from redis.asyncio import Redis

from backends.expenses import expenses_manifest
from gateway.principal import Principal
from gateway.registry.live import LiveToolSource
from gateway.runtime.app import backend_client
from gateway.signing.identity import IDENTITY_HEADER, IdentityHeaders, verify_identity
from gateway.store.registrations import RegistryStore
from gateway.tools.upstream import UpstreamClient
from tests.support.services import EXPENSES_SIGNING_KEY, Backend
from tests.support.tools import read_tool

pytestmark = pytest.mark.anyio

ALICE = Principal(subject="alice@acme.example", org="acme", roles=frozenset({"staff"}))


@pytest.fixture(scope="module", name="redis_url")
def live_source_database(quiet_redis_url: str) -> str:
    """A database no gateway reads its registry from (see conftest)."""
    return quiet_redis_url


async def _served(
    redis: Redis, expenses: Backend, *, secrets: Mapping[str, str], lease_seconds: float = 30.0
) -> tuple[set[str], IdentityHeaders]:
    """Pin the expenses manifest and refresh a live source over it: the names it serves, and its identity."""
    store = RegistryStore(redis)
    proposal = await store.propose("expenses", expenses_manifest(expenses.url), owner="expenses-svc", flags=[])
    assert proposal.proposed_hash is not None
    assert await store.accept("expenses", expected_hash=proposal.proposed_hash, admin="root@acme.example")
    clients: dict[str, UpstreamClient] = {}
    identity = IdentityHeaders()
    source = LiveToolSource(
        static=[read_tool()],
        store=store,
        clients=clients,
        make_client=backend_client,
        secrets=secrets,
        identity=identity,
        health_paths={},
        lease_seconds=lease_seconds,
    )
    try:
        await source.refresh()
        return set(source.current()), identity
    finally:
        for client in clients.values():
            await client.aclose()


@pytest.mark.parametrize(("lease_seconds", "served"), [(30.0, True), (15.0, False)])
async def test_a_pinned_adapter_whose_writes_could_outlast_this_gateways_lease_stays_out(
    redis: Redis, expenses: Backend, lease_seconds: float, served: bool
) -> None:
    """A manifest accepted under one lease is served by a gateway only if its writes (10 s here) fit
    that gateway's own lease with the margin; otherwise that adapter alone stays out, and the rest is served."""
    secrets = {"EXPENSES_SIGNING_KEY": EXPENSES_SIGNING_KEY}
    names, _identity = await _served(redis, expenses, secrets=secrets, lease_seconds=lease_seconds)
    assert "demo_echo" in names
    assert ("expenses_submit" in names) is served and ("expenses_list" in names) is served


@pytest.mark.parametrize("secrets", [{}, {"EXPENSES_SIGNING_KEY": ""}], ids=["unset", "empty"])
async def test_a_pinned_adapter_whose_signing_secret_is_not_set_stays_out_loudly(
    redis: Redis, expenses: Backend, secrets: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Its backend could not verify who is asking, so none of its tools is served (the rest is), and the
    log names the adapter and the variable."""
    with caplog.at_level(logging.ERROR, logger="gateway.registry.live"):
        names, identity = await _served(redis, expenses, secrets=secrets)
    assert "demo_echo" in names
    assert not {name for name in names if name.startswith("expenses_")}
    assert IDENTITY_HEADER not in identity(ALICE, "expenses")
    logged = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert any("expenses" in line and "EXPENSES_SIGNING_KEY" in line for line in logged), logged


async def test_a_served_adapter_is_signed_for_with_its_own_key(redis: Redis, expenses: Backend) -> None:
    names, identity = await _served(redis, expenses, secrets={"EXPENSES_SIGNING_KEY": EXPENSES_SIGNING_KEY})
    assert "expenses_list" in names
    token = identity(ALICE, "expenses")[IDENTITY_HEADER]
    assert verify_identity(token, key=EXPENSES_SIGNING_KEY, adapter="expenses") == {
        "sub": "alice@acme.example",
        "org": "acme",
    }
