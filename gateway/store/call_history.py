"""The requester's recent reads and standing taint in Redis, for card provenance.

Who calls it: the executor's agent path, through the `gateway.provenance.CallHistory` Protocol: one
`append` per answered read (on the read path, so it is one command: ``EVALSHA`` of a short script
doing ``LPUSH``, ``LTRIM`` and ``PEXPIRE``, and for a read that showed third-party text a ``SET PX``
of the taint) and one `recent` and one `taint` per write proposal (``LRANGE``, ``GET``).
One script call costs the client about what one ``SET`` does; the same three commands as a redis-py
pipeline cost half as much again (``bench/provenance_cost.py``).

Redis layout, per owner (org and subject), both keys under one hash tag (one Cluster slot):

- ``countersign:calls:{<owner hash>}`` -> a list of compact JSON records, newest first, at most
  `HistoryRules.max_reads` long, expiring one window after the latest read, so an idle owner leaves
  nothing behind.
- ``countersign:taint:{<owner hash>}`` -> the standing taint (`gateway.provenance.Taint`, compact
  JSON), expiring `HistoryRules.taint_seconds` after the read that set it, by Redis's clock. The
  script sets it only when no taint that lasts longer is there: a later read never shortens it,
  and the history's bound and window do not touch it.

The owner is hashed into the keys' hash tag, so no caller-chosen text (a subject) ever reaches a key
name.

A read is also remembered together with its audit event (`append_audited`): the same commands run
inside the audit append's script (`gateway.store.audit_stream.Along`), one round trip for both. The
owner's keys are in their own slot, so only a sink on a single node (Sentinel included) is given one;
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
from gateway.provenance import CallRecord, HistoryRules, Taint, taint_ms
from gateway.store.audit_stream import Along, RedisStreamAuditSink
from gateway.store.client import is_cluster, store_boundary

__all__ = ["APPEND_SCRIPT", "RedisCallHistory", "history_key", "taint_key"]

_REMEMBER = """
redis.call('LPUSH', K[1], A[1])
redis.call('LTRIM', K[1], 0, tonumber(A[2]) - 1)
redis.call('PEXPIRE', K[1], A[3])
local taint_ms = tonumber(A[5])
if taint_ms > 0 then
  local left = redis.call('PTTL', K[2])
  if left ~= -1 and left < taint_ms then
    redis.call('SET', K[2], A[4], 'PX', taint_ms)
  end
end
"""
"""KEYS: the owner's history and taint. ARGV: the record, the bound, the window in milliseconds, the taint
and its period in milliseconds (0: this read does not taint). A taint with a longer time left is kept."""

APPEND_SCRIPT = f"local K, A = KEYS, ARGV\n{_REMEMBER}\nreturn 1\n"

_ALONG_AUDIT = _REMEMBER
"""The same commands inside the audit append (`Along`): its keys and arguments come after the append's."""


@functools.lru_cache(maxsize=4096)
def history_key(owner: str) -> str:
    """The Redis key of `owner`'s history (`gateway.provenance.history_owner`); the recent owners' are cached."""
    return f"countersign:calls:{{{_tag(owner)}}}"


@functools.lru_cache(maxsize=4096)
def taint_key(owner: str) -> str:
    """The Redis key of `owner`'s standing taint, in the slot of its history."""
    return f"countersign:taint:{{{_tag(owner)}}}"


def _tag(owner: str) -> str:
    return hashlib.sha256(owner.encode()).hexdigest()[:32]


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
        await self._append(keys=_keys(owner), args=list(_args(record, rules)))

    async def append_audited(self, owner: str, record: CallRecord, *, rules: HistoryRules, event: AuditEvent) -> bool:
        """Remember `record` (and the taint it leaves), then append `event` to the audit trail. On a single
        node all go in one script: True when all landed, False when none did (the sink logs the event). On a
        Cluster, two round trips, the history's first.

        Raises:
            StoreUnavailableError: (Cluster) the history could not take it; nothing was audited.
        """
        args = _args(record, rules)
        if not self._together:
            await self._append(keys=_keys(owner), args=list(args))
            return await self._audit.record(event)
        return await self._audit.record(event, along=Along(_ALONG_AUDIT, tuple(_keys(owner)), args))

    async def recent(self, owner: str, *, rules: HistoryRules) -> Sequence[CallRecord]:
        raw = await self._client.lrange(history_key(owner), 0, rules.max_reads - 1)
        return tuple(CallRecord.from_json(item) for item in reversed(raw))

    async def taint(self, owner: str) -> Taint | None:
        raw = await self._client.get(taint_key(owner))
        return None if raw is None else Taint.from_json(raw)


def _keys(owner: str) -> list[str]:
    return [history_key(owner), taint_key(owner)]


def _args(record: CallRecord, rules: HistoryRules) -> tuple[str | int, ...]:
    """The script's arguments: the record, the bound, the window, and the taint with its period (or none)."""
    window = max(1, int(rules.window_seconds * 1000))
    if not record.untrusted_text:
        return (record.to_json(), rules.max_reads, window, "", 0)
    return (record.to_json(), rules.max_reads, window, Taint.of(record, rules).to_json(), taint_ms(rules))
