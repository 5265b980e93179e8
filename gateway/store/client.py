"""The gateway's Redis client, and the boundary that turns Redis failures into `StoreUnavailableError`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.errors import StoreUnavailableError

__all__ = ["Connection", "connect", "store_boundary"]

T = TypeVar("T")


def connect(url: str) -> Connection:
    """A connection to `url`. It connects on first use; callers own it and must `aclose()` it."""
    return Connection(aioredis.from_url(url, decode_responses=False, health_check_interval=30))


def store_boundary(cls: type[T]) -> type[T]:
    """Class decorator: every public coroutine method of `cls` raises `StoreUnavailableError`, chained
    with ``from``, where Redis or the socket under it failed. Applied to every store class, so no
    caller outside this package ever sees (or has to catch) a redis-py exception."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(member):
            setattr(cls, name, _translated(member))
    return cls


def _translated(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await method(*args, **kwargs)
        except (RedisError, OSError) as error:
            raise StoreUnavailableError(f"Redis failed: {type(error).__name__}", cause=type(error).__name__) from error

    return call


@store_boundary
class Connection:
    """One Redis client, shared by every store class of a process (`client`), and its health."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client

    async def ping(self) -> None:
        """Raises `StoreUnavailableError` when Redis does not answer."""
        await self.client.ping()

    async def aclose(self) -> None:
        await self.client.aclose()
