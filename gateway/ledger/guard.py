"""Fail closed: writes proceed only while the ledger is reachable and durable.

Who calls it: the executor before creating a card or running a write, the card service before a
decision, and the composition root at startup. A durable ledger keeps every acknowledged write
(append-only file on, no eviction policy); `gateway.embedded.check_durability` decides that. The
verdict is cached for `interval_seconds` so the check costs nothing per call, and any Redis error
counts as "not writable" until the next successful check.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.embedded import check_durability

__all__ = ["LedgerGuard"]

logger = logging.getLogger(__name__)


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
