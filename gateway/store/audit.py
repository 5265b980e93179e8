"""The audit trail in Redis: every allow, deny and outcome, appended to one stream.

If the stream cannot be written, the event goes to the process log instead, so nothing is
silent even when Redis is down (reads keep working; invariant 7).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.audit import AUDIT_STREAM, AuditEvent
from gateway.store.client import store_boundary

__all__ = ["RedisStreamAuditSink"]

logger = logging.getLogger(__name__)


@store_boundary
class RedisStreamAuditSink:
    """Appends events to the `countersign:audit` stream. The stream is never trimmed by length."""

    def __init__(self, client: aioredis.Redis, *, stream: str = AUDIT_STREAM) -> None:
        self._client = client
        self._stream = stream

    async def record(self, event: AuditEvent) -> None:
        try:
            await self._client.xadd(self._stream, event.to_fields())  # type: ignore[arg-type]
        except (RedisError, OSError) as error:
            # The fallback is itself recorded, in the log, with the whole event.
            logger.error("audit stream unavailable (%s); event: %s", type(error).__name__, event.to_fields())

    async def recent(self, count: int) -> list[AuditEvent]:
        entries: Any = await self._client.xrevrange(self._stream, count=count)
        return _events(reversed(entries or []))

    async def after(self, last_id: str, *, block_ms: int, count: int = 100) -> list[AuditEvent]:
        """Events newer than `last_id`, waiting up to `block_ms` for the first one (for `tail -f`)."""
        answer: Any = await self._client.xread({self._stream: last_id}, block=block_ms, count=count)
        return [event for _stream, entries in answer or [] for event in _events(entries)]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _events(entries: Iterable[tuple[Any, Any]]) -> list[AuditEvent]:
    return [
        AuditEvent.from_fields(_text(eid), {_text(k): _text(v) for k, v in fields.items()}) for eid, fields in entries
    ]
