"""The requester's recent reads in Redis: a bounded list per session or principal, for card provenance.

Who calls it: the executor's agent path, through the `gateway.provenance.CallHistory` Protocol: one
`append` per answered read (on the read path, so it costs one round trip: ``LPUSH``, ``LTRIM`` and
``PEXPIRE`` pipelined, no script) and one `recent` per write proposal (``LRANGE``).

Redis layout: ``countersign:calls:{<owner hash>}`` -> a list of compact JSON records, newest first,
at most `HistoryRules.max_reads` long, expiring one window after the latest read, so an idle owner
leaves nothing behind. The owner (org, subject and the MCP session id, if any) is hashed into the
key's hash tag: one key per owner, so each command touches one Cluster slot, and no caller-chosen
text (a subject, a session id) ever reaches a key name.

The three appended commands are not a transaction: a crash between them leaves a list one entry
too long, or without its expiry refreshed until the next read; both heal on the next append, and
`recent` reads only the bound. Records older than the window are left for the policy to skip.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import redis.asyncio as aioredis

from gateway.provenance import CallRecord, HistoryRules
from gateway.store.client import store_boundary

__all__ = ["RedisCallHistory", "history_key"]


def history_key(owner: str) -> str:
    """The Redis key of `owner`'s history (`gateway.provenance.history_owner`)."""
    tag = hashlib.sha256(owner.encode()).hexdigest()[:32]
    return f"countersign:calls:{{{tag}}}"


@store_boundary
class RedisCallHistory:
    """`CallHistory` on the Redis every gateway process shares."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client

    async def append(self, owner: str, record: CallRecord, *, rules: HistoryRules) -> None:
        key = history_key(owner)
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.lpush(key, record.to_json())
            pipe.ltrim(key, 0, rules.max_reads - 1)
            pipe.pexpire(key, max(1, int(rules.window_seconds * 1000)))
            await pipe.execute()

    async def recent(self, owner: str, *, rules: HistoryRules) -> Sequence[CallRecord]:
        raw = await self._client.lrange(history_key(owner), 0, rules.max_reads - 1)
        return tuple(CallRecord.from_json(item) for item in reversed(raw))
