"""The gateway's Redis client, and the boundary that turns Redis and socket failures into `StoreUnavailableError`."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import Sentinel
from redis.exceptions import RedisClusterException, RedisError

from gateway.config.redis_target import RedisKind, RedisTarget, parse_redis_url
from gateway.errors import ConfigError, StoreUnavailableError

__all__ = ["REDIS_FAILURES", "Connection", "bounded_block", "connect", "is_cluster", "routes", "store_boundary"]

T = TypeVar("T")


DEFAULT_CONNECT_TIMEOUT_SECONDS = 0.5
DEFAULT_TIMEOUT_SECONDS = 0.5


def connect(
    url: str,
    *,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_SECONDS,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> Connection:
    """A connection to `url` (a single node, Sentinel or Cluster: `gateway.config.redis_target`). It connects
    on first use; callers own it and must `aclose()` it. This is the only place a client is made.

    Every command on `Connection.client` fails (as `StoreUnavailableError`) when connecting takes
    longer than `connect_timeout` or an answer longer than `timeout`, so a frozen Redis costs a
    request a bounded wait rather than the library's. A dropped connection is made again on the
    next command: recovery needs no restart (under Sentinel, redis-py's master pool asks the
    sentinels for the master again; under Cluster, its node manager follows MOVED). Blocking reads
    (XREAD[GROUP] BLOCK) would outlast `timeout`, and redis-py applies ``socket_timeout`` to them
    as to any read, so they use `Connection.blocking`, a second client without a read timeout
    whose callers bound each read by its block plus `timeout` (`bounded_block`).

    Raises:
        ConfigError: `url` is not a Redis URL `gateway.config.redis_target.parse_redis_url` reads.
    """
    target = parse_redis_url(url)
    options: dict[str, Any] = {"health_check_interval": 30, "socket_connect_timeout": connect_timeout}
    sentinels: list[aioredis.Redis] = []
    return Connection(
        _client(target, sentinels, socket_timeout=timeout, **options),
        blocking=_client(target, sentinels, socket_timeout=None, **options),
        timeout=timeout,
        sentinels=sentinels,
    )


def _client(target: RedisTarget, sentinels: list[aioredis.Redis], **options: Any) -> aioredis.Redis:
    """A client of `target`; the clients of the sentinels it asks, if any, are added to `sentinels`
    (the master's client does not close them)."""
    if target.kind is RedisKind.SINGLE:
        return aioredis.from_url(target.url, decode_responses=False, **options)
    credentials: dict[str, Any] = {"username": target.username, "password": target.password, "ssl": target.tls}
    if target.kind is RedisKind.SENTINEL:
        if target.master is None:
            raise ConfigError("a Sentinel deployment needs its master's name")
        # Sentinels are asked without the master's credentials, within the same bounds.
        bounds = {
            "socket_timeout": options["socket_timeout"] or DEFAULT_TIMEOUT_SECONDS,
            "socket_connect_timeout": options["socket_connect_timeout"],
        }
        # (Untyped before redis 8.2, typed since: the ignore serves both.)
        sentinel = Sentinel(list(target.nodes), sentinel_kwargs=bounds)  # type: ignore[no-untyped-call, unused-ignore]
        sentinels.extend(sentinel.sentinels)
        master: aioredis.Redis = sentinel.master_for(
            target.master, db=target.db, decode_responses=False, **credentials, **options
        )
        return master
    cluster = RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
        decode_responses=False,
        **credentials,
        **options,
    )
    # RedisCluster has the same command API as Redis (redis-py's own commands mixins), and every
    # store class uses only what both have; `is_cluster` tells the few places that route differently.
    return cast(aioredis.Redis, cluster)


def is_cluster(client: aioredis.Redis) -> bool:
    """Whether `client` is a Redis Cluster client (commands without keys then need a node to go to)."""
    return isinstance(client, RedisCluster)


async def routes(client: aioredis.Redis, key: str | None = None) -> list[dict[str, Any]]:
    """Where a command without keys must go: the keyword arguments that send it there, one per target.

    A single node (or a Sentinel master): one target, no arguments. A Cluster: the node that owns
    `key`'s slot, so the command runs on the same node (and, in a pipeline, the same connection) as
    the writes to `key` it is about (``WAITAOF``, ``CONFIG GET``); without a key, every primary (a
    question every node must answer, such as "is it durable?").
    """
    if not isinstance(client, RedisCluster):
        return [{}]
    await client.initialize()  # the slot map is learnt on first use; a no-op once known
    if key is not None:
        return [{"target_nodes": client.get_node_from_key(key)}]
    return [{"target_nodes": node} for node in client.get_primaries()]


@contextlib.asynccontextmanager
async def bounded_block(block_ms: int, slack: float) -> AsyncIterator[None]:
    """Bounds one blocking read: its block, plus `slack` for the answer to arrive. A read cut by it
    raises `TimeoutError`, which a store boundary turns into `StoreUnavailableError`."""
    async with asyncio.timeout(block_ms / 1000 + slack):
        yield


REDIS_FAILURES: tuple[type[Exception], ...] = (RedisError, RedisClusterException, ConnectionError, TimeoutError)
"""What a store boundary translates: redis-py's errors, and the connection's own ``ConnectionError`` (reset,
refused, broken pipe) and ``TimeoutError`` (a bounded read, `bounded_block`). Nothing else: a disk failure
of an archive is its own error (`gateway.errors.ArchiveError`), and any other exception is a bug."""


def store_boundary(cls: type[T]) -> type[T]:
    """Class decorator: every public coroutine method of `cls` raises `StoreUnavailableError`, chained
    with ``from``, where Redis or the socket under it failed (`REDIS_FAILURES`). Applied to every store
    class, so no caller outside this package ever sees (or has to catch) a redis-py exception.

    That includes `RedisClusterException`, which is not a `RedisError`: the Cluster client raises it
    when it cannot route a command, e.g. ``TTL exhausted`` redirections, or a pipeline it re-sends
    after a lost connection, whose keyless commands (WAITAOF, CONFIG GET) have by then lost the
    ``target_nodes`` they were queued with (redis-py 8.1 pops them on the first attempt)."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(member):
            setattr(cls, name, _translated(member))
    return cls


def _translated(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await method(*args, **kwargs)
        except REDIS_FAILURES as error:
            raise StoreUnavailableError(f"Redis failed: {type(error).__name__}", cause=type(error).__name__) from error

    return call


@store_boundary
class Connection:
    """One Redis client, shared by every store class of a process (`client`), and its health.

    `blocking` serves blocking stream reads (see `connect`); without one given, `client` does.
    `timeout` is the read timeout of `client`, the slack a blocking read gets past its block."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        blocking: aioredis.Redis | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        sentinels: list[aioredis.Redis] | None = None,
    ) -> None:
        self.client = client
        self.blocking = blocking if blocking is not None else client
        self.timeout = timeout
        self._sentinels = sentinels or []

    async def ping(self) -> None:
        """Raises `StoreUnavailableError` when Redis does not answer."""
        await self.client.ping()

    async def aclose(self) -> None:
        try:
            await self.client.aclose()
        finally:
            if self.blocking is not self.client:
                await self.blocking.aclose()
            for sentinel in self._sentinels:
                await sentinel.aclose()
