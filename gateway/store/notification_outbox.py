"""The notification outbox in Redis: every notification kept until a receiver took it.

Who calls it: the card ledger's wrapper (`gateway.notifications.card_alerts`) enqueues, the delivery loop
(`gateway.notifications.delivery`) takes, finishes and reschedules. It knows nothing of webhooks or payloads:
it stores `Notification` values by id.

Layout (one hash tag, so every script touches one Cluster slot): a sorted set of due deliveries
(member: the notification id; score: when it is due, by the Redis clock), a hash of the
notifications themselves, and one short-lived marker per id ever enqueued. A delivery that is
taken is not removed but pushed `lease_ms` into the future: a process that dies mid-delivery
leaves it to be taken again (at-least-once; receivers dedupe on the id). `enqueue` of an id seen
within `DEDUPE_SECONDS` does nothing, so replaying the enqueue of one card event is harmless.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

from gateway.notifications.message import Notification
from gateway.store.client import store_boundary

__all__ = ["DEDUPE_SECONDS", "RedisNotificationOutbox"]

DEDUPE_SECONDS = 7 * 24 * 3600
_TAG = "cs:{ntf}"
_KEYS = [f"{_TAG}:due", f"{_TAG}:items"]

_NOW = "local t = redis.call('TIME'); local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"

# KEYS: due, items, seen marker. ARGV: id, notification json, dedupe seconds. Returns 1 if enqueued.
_ENQUEUE = (
    _NOW
    + """
if not redis.call('SET', KEYS[3], '1', 'NX', 'EX', ARGV[3]) then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
return 1
"""
)

# KEYS: due, items. ARGV: limit, lease_ms. Returns the notifications taken (json strings).
_TAKE = (
    _NOW
    + """
local taken = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))) do
  local item = redis.call('HGET', KEYS[2], id)
  if item then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), id)
    taken[#taken + 1] = item
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return taken
"""
)

# KEYS: due, items. ARGV: id, notification json, delay_ms.
_RESCHEDULE = (
    _NOW
    + """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
return 1
"""
)


@store_boundary
class RedisNotificationOutbox:
    """Durable, deduplicated, leased deliveries. Every method raises `StoreUnavailableError` when Redis fails."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._enqueue = client.register_script(_ENQUEUE)
        self._take = client.register_script(_TAKE)
        self._reschedule = client.register_script(_RESCHEDULE)

    async def enqueue(self, notification: Notification) -> bool:
        """Keep `notification`, due now. False when its id was enqueued before (within `DEDUPE_SECONDS`)."""
        keys = [*_KEYS, f"{_TAG}:seen:{notification.id}"]
        answer: Any = await self._enqueue(keys=keys, args=[notification.id, _dump(notification), DEDUPE_SECONDS])
        return int(answer) == 1

    async def take(self, *, limit: int, lease_ms: int) -> list[Notification]:
        """Up to `limit` due notifications, each leased for `lease_ms` (then due again unless finished)."""
        answer: Any = await self._take(keys=_KEYS, args=[limit, lease_ms])
        return [_load(raw) for raw in answer]

    async def finish(self, notification_id: str) -> None:
        """Forget a delivered (or abandoned) notification; its dedupe marker stays."""
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.zrem(_KEYS[0], notification_id)
            pipe.hdel(_KEYS[1], notification_id)
            await pipe.execute()

    async def reschedule(self, notification: Notification, *, delay_ms: int) -> None:
        """Store `notification` (its attempts counted) and make it due `delay_ms` from now."""
        await self._reschedule(keys=_KEYS, args=[notification.id, _dump(notification), delay_ms])

    async def pending(self) -> int:
        """How many notifications are not delivered yet."""
        return int(await self._client.zcard(_KEYS[0]))

    async def get(self, notification_id: str) -> Notification | None:
        raw: Any = await self._client.hget(_KEYS[1], notification_id)
        return _load(raw) if raw else None

    async def all(self) -> Sequence[Notification]:
        raws: Any = await self._client.hvals(_KEYS[1])
        return [_load(raw) for raw in raws]


def _dump(notification: Notification) -> str:
    return json.dumps(
        {
            "id": notification.id,
            "webhook": notification.webhook,
            "body": notification.body,
            "attempts": notification.attempts,
        }
    )


def _load(raw: bytes | str) -> Notification:
    fields = json.loads(raw)
    return Notification(id=fields["id"], webhook=fields["webhook"], body=fields["body"], attempts=fields["attempts"])
