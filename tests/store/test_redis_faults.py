"""Redis faults are bounded by the gateway: a frozen Redis costs a call well under two seconds, as a
retryable refusal, and the gateway recovers by itself once Redis answers again."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import replace

import anyio
import httpx
import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisClusterException

from backends.serve import serve_app_in_thread
from gateway.errors import StoreUnavailableError
from gateway.runtime.app import create_app
from gateway.store.client import connect, store_boundary
from tests.support.agents import agent, error_code, make_key
from tests.support.redis_server import free_port, start_redis_process
from tests.support.services import Backend, gateway_settings

pytestmark = pytest.mark.anyio

BOOKING = {"room_id": "room-atlas", "date": "2027-03-01", "start": "09:00", "end": "10:00", "title": "standup"}


@pytest.fixture
def frozen_redis() -> Iterator[tuple[str, int]]:
    """A Redis of this test's own; whatever the test does, it is thawed (SIGCONT) before it stops."""
    with start_redis_process(appendonly=True) as (url, pid):
        try:
            yield url, pid
        finally:
            os.kill(pid, signal.SIGCONT)


@pytest.mark.slow
async def test_a_frozen_redis_refuses_calls_quickly_and_the_gateway_recovers_without_a_restart(
    frozen_redis: tuple[str, int], backends: dict[str, Backend]
) -> None:
    """The key stays cached, so the frozen store shows at the ledger: LEDGER_UNAVAILABLE, retryable."""
    url, pid = frozen_redis
    settings = replace(gateway_settings(url, backends), run_worker=False, key_cache_seconds=60.0)
    redis = Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        with anyio.fail_after(5):
            token = await make_key(redis, roles=("staff",))
    finally:
        await redis.aclose()
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        with anyio.fail_after(20):
            async with agent(f"{base}/mcp", token) as client:
                first = await client.call_tool("rooms_book", BOOKING)
                assert not first.is_error, first
                os.kill(pid, signal.SIGSTOP)
                try:
                    with anyio.fail_after(1.5):
                        frozen = await client.call_tool("rooms_book", {**BOOKING, "start": "11:00", "end": "12:00"})
                    assert error_code(frozen) == "LEDGER_UNAVAILABLE"
                finally:
                    os.kill(pid, signal.SIGCONT)
                deadline = time.monotonic() + 10
                while True:
                    again = await client.call_tool("rooms_book", {**BOOKING, "start": "13:00", "end": "14:00"})
                    if not again.is_error or time.monotonic() > deadline:
                        break
                    await anyio.sleep(0.1)
                assert not again.is_error, again


@pytest.mark.slow
async def test_the_auth_edge_answers_503_while_redis_is_frozen(
    frozen_redis: tuple[str, int], backends: dict[str, Backend]
) -> None:
    """A key the gateway cannot look up is neither accepted nor refused as bad: 503, retry later."""
    url, pid = frozen_redis
    settings = replace(gateway_settings(url, backends), run_worker=False, key_cache_seconds=0.0)
    redis = Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        with anyio.fail_after(5):
            token = await make_key(redis, roles=("staff",))
    finally:
        await redis.aclose()
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        headers = {"authorization": f"Bearer {token}", "accept": "application/json, text/event-stream"}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        async with httpx.AsyncClient(timeout=5) as http:
            os.kill(pid, signal.SIGSTOP)
            try:
                with anyio.fail_after(1.5):
                    answer = await http.post(f"{base}/mcp", headers=headers, json=body)
                assert answer.status_code == 503
                assert answer.headers["retry-after"] == "1"  # a retryable refusal says when to retry
            finally:
                os.kill(pid, signal.SIGCONT)
            with anyio.fail_after(10):
                while (await http.post(f"{base}/mcp", headers=headers, json=body)).status_code == 503:
                    await anyio.sleep(0.1)


@pytest.mark.slow
async def test_reads_fail_fast_too_while_redis_is_frozen_and_come_back_without_a_restart(
    frozen_redis: tuple[str, int], backends: dict[str, Backend]
) -> None:
    """Invariant 7: a read that cannot be audited is not answered, even for a key still in the cache."""
    url, pid = frozen_redis
    settings = replace(gateway_settings(url, backends), run_worker=False, key_cache_seconds=60.0)
    redis = Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        with anyio.fail_after(5):
            token = await make_key(redis, roles=("staff",))
    finally:
        await redis.aclose()
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        with anyio.fail_after(20):
            async with agent(f"{base}/mcp", token) as client:
                assert not (await client.call_tool("rooms_list", {})).is_error
                os.kill(pid, signal.SIGSTOP)
                try:
                    with anyio.fail_after(3):
                        first = await client.call_tool("rooms_list", {})  # ran, but its audit could not land
                        second = await client.call_tool("rooms_list", {})  # refused before any backend call
                    assert (error_code(first), error_code(second)) == ("LEDGER_UNAVAILABLE", "LEDGER_UNAVAILABLE")
                finally:
                    os.kill(pid, signal.SIGCONT)
                deadline = time.monotonic() + 10
                while (again := await client.call_tool("rooms_list", {})).is_error and time.monotonic() < deadline:
                    await anyio.sleep(0.1)
                assert not again.is_error, again


async def test_a_cluster_none_of_whose_nodes_answers_is_a_store_unavailable_error() -> None:
    """redis-py's Cluster client says so with a RedisClusterException (RedisClusterUnreachableError, one of
    them, from redis 8.2), which is no RedisError: the store boundary turns it into StoreUnavailableError
    too, so the gateway fails closed rather than crashing."""
    connection = connect(f"redis+cluster://127.0.0.1:{free_port()},127.0.0.1:{free_port()}")
    try:
        with pytest.raises(StoreUnavailableError) as refused:
            await connection.ping()
    finally:
        await connection.aclose()
    # Not a RedisError: without RedisClusterException in the boundary's catch, this would escape it.
    assert isinstance(refused.value.__cause__, RedisClusterException)
    assert refused.value.cause == type(refused.value.__cause__).__name__


@pytest.mark.parametrize(
    ("failure", "translated"),
    [
        (ConnectionResetError(104, "Connection reset by peer"), True),
        (TimeoutError(), True),
        (NotADirectoryError(20, "Not a directory", "/var/lib/countersign/audit"), False),
        (PermissionError(13, "Permission denied", "/var/lib/countersign/cards"), False),
    ],
)
async def test_the_store_boundary_translates_socket_failures_and_leaves_disk_failures_alone(
    failure: OSError, translated: bool
) -> None:
    """A connection's own failures (reset, a bounded read cut) are the store's: `StoreUnavailableError`. A disk
    failure is not Redis's, so the boundary does not call it one (the archives translate their own)."""

    @store_boundary
    class Store:
        async def call(self) -> None:
            raise failure

    with pytest.raises((StoreUnavailableError, OSError)) as raised:
        await Store().call()
    assert isinstance(raised.value, StoreUnavailableError) is translated
    if translated:
        assert raised.value.__cause__ is failure
    else:
        assert raised.value is failure
