"""Fail closed: writes proceed only while the ledger is reachable and durable.

Who calls it: the executor before creating a card or running a write, the card service before a
decision, and the composition root at startup. A durable ledger keeps every acknowledged write
(append-only file on, no eviction policy); `check_durability` decides that. The
verdict is cached for `interval_seconds` so the check costs nothing per call, and any Redis error
counts as "not writable" until the next successful check.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.exceptions import RedisError

__all__ = ["DurabilityReport", "LedgerGuard", "check_durability", "config_value"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class DurabilityReport:
    """Whether a server keeps every acknowledged write; the gateway refuses writes when it does not."""

    durable: bool
    """True exactly when `problems` is empty."""
    problems: tuple[str, ...] = ()
    """Operator-readable reasons, e.g. ``"appendonly is off"``."""

    def __post_init__(self) -> None:
        if self.durable == bool(self.problems):
            raise ValueError("a durability report is durable exactly when it lists no problems")


async def check_durability(client: aioredis.Redis) -> DurabilityReport:
    """Report whether the server behind `client` keeps every write it acknowledged.

    Durable means ``appendonly yes`` and ``maxmemory-policy noeviction``. A server that refuses
    ``CONFIG GET`` (renamed, disabled, or denied by ACL) cannot be verified and is reported as not
    durable.

    Raises:
        redis.ConnectionError: the server cannot be reached; that is not a durability verdict.
    """
    try:
        appendonly = config_value(await client.config_get("appendonly"), "appendonly")
        policy = config_value(await client.config_get("maxmemory-policy"), "maxmemory-policy")
    except redis.ResponseError as exc:
        return DurabilityReport(durable=False, problems=(f"CONFIG GET is unavailable ({exc}); cannot verify",))
    problems: list[str] = []
    if appendonly != "yes":
        problems.append("appendonly is off" if appendonly == "no" else f"appendonly is {appendonly!r}")
    if policy != "noeviction":
        problems.append(f"maxmemory-policy is {policy} (eviction on)")
    return DurabilityReport(durable=not problems, problems=tuple(problems))


def config_value(reply: Any, name: str) -> str | None:
    for key, value in dict(reply).items():
        if _text(key) == name:
            return _text(value)
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class LedgerGuard:
    """Cached answer to "may a write go through the ledger now?"."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        interval_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._interval = interval_seconds
        self._clock = clock
        self._checked_at: float | None = None
        self._writable = False
        self.problems: tuple[str, ...] = ("not checked yet",)

    async def writable(self) -> bool:
        """True while the last check (at most `interval_seconds` old) found the ledger durable."""
        now = self._clock()
        if self._checked_at is None or now - self._checked_at >= self._interval:
            await self.check()
        return self._writable

    async def check(self) -> bool:
        """Check now, log a change of verdict, and remember it."""
        try:
            report = await check_durability(self._client)
            writable, problems = report.durable, report.problems
        except (RedisError, OSError) as error:
            writable, problems = False, (f"ledger unreachable: {type(error).__name__}",)
        if writable != self._writable or self._checked_at is None:
            if writable:
                logger.info("ledger is durable; writes are enabled")
            else:
                logger.error("writes are refused: %s", "; ".join(problems))
        self._writable, self.problems, self._checked_at = writable, problems, self._clock()
        return writable

    def invalidate(self) -> None:
        """Forget the verdict (after a Redis error), so the next call checks again."""
        self._checked_at = None
        self._writable = False
