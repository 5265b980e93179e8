"""The requester's recent reads in Redis: a bounded list per session or principal, for card provenance.

Who calls it: the executor's agent path, through the `gateway.provenance.CallHistory` Protocol: one
`append` per answered read (on the read path, so it is one command: ``EVALSHA`` of a three-line
script doing ``LPUSH``, ``LTRIM`` and ``PEXPIRE``) and one `recent` per write proposal (``LRANGE``).
One script call costs the client about what one ``SET`` does; the same three commands as a redis-py
pipeline cost half as much again (``bench/provenance_cost.py``).

Redis layout: ``countersign:calls:{<owner hash>}`` -> a list of compact JSON records, newest first,
at most `HistoryRules.max_reads` long, expiring one window after the latest read, so an idle owner
leaves nothing behind. The owner (org, subject and the MCP session id, if any) is hashed into the
key's hash tag: one key per owner, so each command touches one Cluster slot, and no caller-chosen
text (a subject, a session id) ever reaches a key name.

A read is also remembered together with its audit event (`append_audited`): the same three commands
run inside the audit append's script (`gateway.store.audit_stream.Along`), one round trip for both. The
history key is in its own slot, so only a sink on a single node (Sentinel included) is given one;
on a Cluster the two are separate round trips.

Records older than the window (a list refreshed by a later read keeps them) are left for the
policy to skip (`policies.provenance.assess`).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

import redis.asyncio as aioredis

from gateway.audit.events import AuditEvent
from gateway.provenance import CallRecord, HistoryRules
from gateway.store.audit_stream import Along, RedisStreamAuditSink
from gateway.store.client import is_cluster, store_boundary

__all__ = ["APPEND_SCRIPT", "RedisCallHistory", "history_key"]

APPEND_SCRIPT = """
-- KEYS[1]: the owner's history. ARGV: the record, the bound, the window in milliseconds.
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
return redis.call('PEXPIRE', KEYS[1], ARGV[3])
"""

_ALONG_AUDIT = """
redis.call('LPUSH', K[1], A[1])
redis.call('LTRIM', K[1], 0, tonumber(A[2]) - 1)
redis.call('PEXPIRE', K[1], A[3])
"""
"""`APPEND_SCRIPT` inside the audit append (`Along`): its key and arguments come after the append's."""


@functools.lru_cache(maxsize=4096)
def history_key(owner: str) -> str:
    """The Redis key of `owner`'s history (`gateway.provenance.history_owner`); the recent owners' are cached."""
    tag = hashlib.sha256(owner.encode()).hexdigest()[:32]
    return f"countersign:calls:{{{tag}}}"


@store_boundary
class RedisCallHistory:
    """`CallHistory` and `AuditedCallHistory` on the Redis every gateway process shares; `audit` is the
    audit sink on the same client, which an answered read's event is appended to."""

    def __init__(self, client: aioredis.Redis, *, audit: RedisStreamAuditSink) -> None:
        self._client = client
        self._append = client.register_script(APPEND_SCRIPT)  # EVALSHA; loads it again after NOSCRIPT
        self._audit = audit
        self._together = not is_cluster(client)
        """Whether the history and the stream can be written by one script (not across Cluster slots)."""

    async def append(self, owner: str, record: CallRecord, *, rules: HistoryRules) -> None:
        await self._append(keys=[history_key(owner)], args=[record.to_json(), rules.max_reads, _window_ms(rules)])

    async def append_audited(self, owner: str, record: CallRecord, *, rules: HistoryRules, event: AuditEvent) -> bool:
        """Remember `record`, then append `event` to the audit trail. On a single node both go in one
        script: True when both landed, False when neither did (the sink logs the event). On a Cluster,
        two round trips, the history's first.

        Raises:
            StoreUnavailableError: (Cluster) the history could not take it; nothing was audited.
        """
        args = (record.to_json(), rules.max_reads, _window_ms(rules))
        if not self._together:
            await self._append(keys=[history_key(owner)], args=list(args))
            return await self._audit.record(event)
        return await self._audit.record(event, along=Along(_ALONG_AUDIT, (history_key(owner),), args))

    async def recent(self, owner: str, *, rules: HistoryRules) -> Sequence[CallRecord]:
        raw = await self._client.lrange(history_key(owner), 0, rules.max_reads - 1)
        return tuple(CallRecord.from_json(item) for item in reversed(raw))


def _window_ms(rules: HistoryRules) -> int:
    return max(1, int(rules.window_seconds * 1000))
