"""The live tool source against a real Redis: what it serves of the pinned manifests, under which lease."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from backends.expenses import expenses_manifest
from gateway.principal import Principal
from gateway.registry import live
from gateway.registry.live import LiveToolSource
from gateway.registry.manifest import AdapterManifest
from gateway.runtime.app import backend_client
from gateway.signing.identity import IDENTITY_HEADER, IdentityHeaders, verify_identity
from gateway.store.registrations import RegistryStore
from gateway.tools.declarations import Tool
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


def _named(name: str, base_url: str) -> dict[str, Any]:
    """The expenses manifest as adapter `name` offers it (its tools carry that name's prefix)."""
    document: dict[str, Any] = json.loads(json.dumps(expenses_manifest(base_url)).replace("expenses_", f"{name}_"))
    return document


async def _pin(store: RegistryStore, name: str, document: Mapping[str, Any]) -> None:
    proposal = await store.propose(name, document, owner=f"{name}-svc", flags=[])
    assert proposal.proposed_hash is not None
    assert await store.accept(name, expected_hash=proposal.proposed_hash, admin="root@acme.example")


class _Counting:
    """The source's `tools_from_manifest`, counting the builds by adapter name (the real builder runs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.built: list[str] = []
        real = live.tools_from_manifest

        def counted(adapter: str, manifest: AdapterManifest) -> tuple[Tool, ...]:
            self.built.append(adapter)
            return real(adapter, manifest)

        monkeypatch.setattr(live, "tools_from_manifest", counted)


async def _source(
    redis: Redis, store: RegistryStore | None = None
) -> tuple[LiveToolSource, RegistryStore, dict[str, UpstreamClient]]:
    store = store or RegistryStore(redis)
    clients: dict[str, UpstreamClient] = {}
    source = LiveToolSource(
        static=[read_tool()],
        store=store,
        clients=clients,
        make_client=backend_client,
        secrets={"EXPENSES_SIGNING_KEY": EXPENSES_SIGNING_KEY},
        identity=IdentityHeaders(),
        health_paths={},
        lease_seconds=30.0,
    )
    return source, store, clients


async def test_accepting_one_adapter_builds_only_its_tools_and_keeps_the_others_served(
    redis: Redis, expenses: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tools of a pinned manifest that did not change are kept, not built again, when another adapter is
    accepted or removed; the new one's are built and served beside them, the removed one's dropped."""
    counting = _Counting(monkeypatch)
    source, store, clients = await _source(redis)
    try:
        await _pin(store, "ledger", _named("ledger", expenses.url))
        await _pin(store, "travel", _named("travel", expenses.url))
        assert await source.refresh()
        assert sorted(counting.built) == ["ledger", "travel"]
        kept = source.current()["ledger_submit"]

        await _pin(store, "meals", _named("meals", expenses.url))
        assert await source.refresh()
        assert counting.built[2:] == ["meals"]
        served = set(source.current())
        assert {"ledger_submit", "travel_submit", "meals_submit", "demo_echo"} <= served
        assert source.current()["ledger_submit"] is kept

        assert await store.remove("travel")
        assert await source.refresh()
        assert counting.built[3:] == []
        assert not {name for name in source.current() if name.startswith("travel_")}
        assert {"ledger_submit", "meals_submit"} <= set(source.current())
    finally:
        for client in clients.values():
            await client.aclose()


async def test_a_changed_manifest_is_built_again_and_served_as_changed(
    redis: Redis, expenses: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An accepted new version of an adapter's manifest replaces its tools: the new description and input
    schema are what is served (and its definition hash moves), while the unchanged adapter is not rebuilt."""
    counting = _Counting(monkeypatch)
    source, store, clients = await _source(redis)
    try:
        await _pin(store, "ledger", _named("ledger", expenses.url))
        await _pin(store, "travel", _named("travel", expenses.url))
        await source.refresh()
        before = source.current().version("ledger_submit")

        changed = _named("ledger", expenses.url)
        submit = next(tool for tool in changed["tools"] if tool["name"] == "ledger_submit")
        submit["description"] = "Submit an expense report for the ledger. An approver must countersign it first."
        submit["input_schema"]["properties"]["title"]["maxLength"] = 80
        await _pin(store, "ledger", changed)
        assert await source.refresh()

        assert counting.built[2:] == ["ledger"]
        box = source.current()
        assert box["ledger_submit"].description == submit["description"]
        assert box.input_schema("ledger_submit")["properties"]["title"]["maxLength"] == 80
        assert box.version("ledger_submit") != before
    finally:
        for client in clients.values():
            await client.aclose()


class _HeldStore(RegistryStore):
    """A real registry store whose first read of the pinned manifests is held, once read, until `release`:
    the refresh that made it finishes after anything started meanwhile, with what it read then."""

    def __init__(self, redis: Redis) -> None:
        super().__init__(redis)
        self.read = anyio.Event()
        self.release = anyio.Event()
        self._held = False

    async def pinned(self) -> dict[str, Mapping[str, Any]]:
        pinned = await super().pinned()
        if not self._held:
            self._held = True
            self.read.set()
            await self.release.wait()
        return pinned


async def test_an_older_refresh_never_swaps_its_tools_in_after_a_newer_one(redis: Redis, expenses: Backend) -> None:
    """A registry poll that read the pinned manifests before an accept, and an accept's own refresh after it,
    overlap: the adapter accepted in between is served once both are done (they run one after the other, so
    the older cannot put its tools back over the newer's)."""
    store = _HeldStore(redis)
    source, store, clients = await _source(redis, store)
    try:
        await _pin(store, "ledger", _named("ledger", expenses.url))
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(source.refresh)  # the poll: reads the registry as it was, then is held
            await store.read.wait()
            await _pin(store, "meals", _named("meals", expenses.url))
            accepted = anyio.Event()

            async def accept_refresh() -> None:
                await source.refresh()
                accepted.set()

            tasks.start_soon(accept_refresh)
            # Let it run as far as it can while the poll is held: to its end, or to waiting for the poll's turn.
            with anyio.fail_after(30):
                while not accepted.is_set() and source.refresh_waiting() == 0:
                    await anyio.sleep(0.01)
            store.release.set()
        assert {"ledger_submit", "meals_submit"} <= set(source.current())
    finally:
        for client in clients.values():
            await client.aclose()


class _WorkerThreadGate:
    """The event loop's worker threads, narrowed to one that the test holds, so a refresh waiting for a thread
    stops there until the test hands the thread on (the real limiter `anyio.to_thread` takes its threads from)."""

    def __init__(self) -> None:
        self._limiter = anyio.to_thread.current_default_thread_limiter()
        self._tokens = self._limiter.total_tokens

    async def __aenter__(self) -> _WorkerThreadGate:
        self._limiter.total_tokens = 1
        await self._limiter.acquire()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._limiter.statistics().borrowers:
            self._limiter.release()
        self._limiter.total_tokens = self._tokens

    async def waited_for(self) -> None:
        """Return once another task waits for the thread the test holds."""
        with anyio.fail_after(30):
            while self._limiter.statistics().tasks_waiting == 0:
                await anyio.sleep(0)

    async def let_one_through(self) -> None:
        """Hand the thread to the task waiting for it, and hold it again once that task's work in it is done."""
        self._limiter.release()
        await self._limiter.acquire()

    def release(self) -> None:
        self._limiter.release()


async def test_an_upstreams_tools_served_while_a_refresh_builds_are_served_after_it(
    redis: Redis, expenses: Backend
) -> None:
    """A fronted MCP server's reviewed tools, served while a registry refresh is building its toolbox in a worker
    thread, are in the toolbox the refresh puts in place: they are not dropped until the next change."""
    source, store, clients = await _source(redis)
    try:
        await source.serve_upstream("files", [read_tool("files_read", adapter="files")])
        await _pin(store, "ledger", _named("ledger", expenses.url))
        async with _WorkerThreadGate() as gate, anyio.create_task_group() as tasks:
            tasks.start_soon(source.refresh)
            await gate.waited_for()  # to build the pinned manifests' tools
            await gate.let_one_through()
            await gate.waited_for()  # to build the toolbox it puts in place: what it serves is chosen by now
            more = [read_tool("files_read", adapter="files"), read_tool("files_write", adapter="files")]
            await source.serve_upstream("files", more)
            assert "files_write" in source.current()
            gate.release()
        assert {"ledger_submit", "files_read", "files_write", "demo_echo"} <= set(source.current())
    finally:
        for client in clients.values():
            await client.aclose()
