"""The audit trail in Redis: every allow, deny and outcome, appended to one hash-chained stream.

Each entry is appended by one Lua script that reads the chain head, checks it is the one the MAC
was computed from, XADDs the entry in its compact form (`gateway.audit_codec`) with its MAC ``m``
and moves the head, in one step (`gateway.audit_chain` says what the MAC covers). The entry's
sequence number is its stream id's second part: the script adds it as ``<ms>-<seq>``, ``<ms>`` the
Redis server's time (never before the newest entry's), so the id costs what ``*`` would and an
entry read alone still says its place in the chain. Only a stream that already holds a later id
(an entry not appended here) gets ``*`` and the number as a field ``q``. The MAC is computed
here, not in Lua (Redis has no HMAC-SHA256), so the script is a compare-and-set: when another
process appended first it answers the new head and the entry is MACed again. Every key shares
the stream's slot: a key without braces hashes on its whole name, so ``{countersign:audit}:head``
lands with ``countersign:audit`` in Redis Cluster.

An append can carry one more write (`Along`, e.g. the call history's for an answered read): the
same script runs it after the head check and before the ``XADD``, so the two land together in one
round trip, or neither does (the head check fails before any write). Its keys must be in the
stream's slot, or the deployment a single node (Sentinel included), never a Cluster.

If the stream cannot be written, the event goes to the process log instead, so nothing is silent
even when Redis is down, and `record` answers False: the caller then refuses what it was auditing
(invariant 7: when Redis is gone, reads fail fast too, since the call can no longer be audited).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.audit import AUDIT_STREAM, AuditEvent
from gateway.audit_chain import GENESIS, ChainHead, entry_mac
from gateway.metrics import count_refusal
from gateway.store.client import DEFAULT_TIMEOUT_SECONDS, bounded_block, store_boundary

__all__ = ["Along", "RedisStreamAuditSink", "audit_keys", "entry_fields"]

logger = logging.getLogger(__name__)

_APPEND = """
local a, at = {}, 1
for size in string.gmatch(ARGV[2], '%%d+') do
  a[#a + 1] = string.sub(ARGV[1], at, at + tonumber(size) - 1)
  at = at + tonumber(size)
end
local head = redis.call('HMGET', KEYS[2], 'mac', 'seq', 'id')
local mac = head[1] or ''
if mac ~= a[1] then
  return {mac, head[2] or '0', head[3] or ''}
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local newest = tonumber(string.match(head[3] or '', '^(%%d+)-') or '0')
if newest > ms then ms = newest end
%s
local args = {'XADD', KEYS[1], string.format('%%.0f-%%s', ms, a[2])}
for i = 5 + tonumber(a[4]), #a do
  args[#args + 1] = a[i]
end
args[#args + 1] = 'm'
args[#args + 1] = a[3]
local id = redis.pcall(unpack(args))
if type(id) == 'table' and id.err then
  args[3] = '*'
  args[#args + 1] = 'q'
  args[#args + 1] = a[2]
  id = redis.call(unpack(args))
end
redis.call('HSET', KEYS[2], 'mac', a[3], 'seq', a[2], 'id', id)
return id
"""
"""ARGV: one string and its parts' byte sizes, comma-separated, which the script cuts into ``a``: the
head the MAC was computed from, the entry's sequence number, its MAC, the count of the `Along`
write's arguments and those arguments, then the entry's stored fields (names and values in turn).
redis-py packs each argument of a command in turn, and each costs it about a microsecond: 2 cost
it less than the 9 or more these would be. It answers the new entry's id, or the head it found
(MAC, sequence number, id) when that is not the one the MAC was computed from. ``%s`` takes the
`Along` write's Lua."""

_MAX_ATTEMPTS = 50
"""Appends retried after another process moved the head first; each retry costs one round trip."""


@dataclass(frozen=True, slots=True)
class Along:
    """A write sent in the same script as an append, after its head check and before its ``XADD``.

    `lua` reads its keys as ``KEYS[3]``, ``KEYS[4]``... and its arguments, as strings, as ``a[5]``,
    ``a[6]``... (`keys` and `args`, in order); it must not return. Its keys must share the
    stream's Cluster slot unless the deployment is a single node."""

    lua: str
    keys: tuple[str, ...]
    args: tuple[str | int, ...]


def audit_keys(stream: str) -> dict[str, str]:
    """The keys beside `stream`, all in its Cluster slot: the chain head, the archive checkpoint, the lock."""
    return {name: f"{{{stream}}}:{name}" for name in ("head", "archived", "archiver")}


@store_boundary
class RedisStreamAuditSink:
    """Appends events to the `countersign:audit` stream, each chained to the one before by its MAC.

    `secret` keys the chain; a sink built without one can read but records every event to the
    process log instead (a chain with unkeyed links could not be verified).
    """

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        secret: bytes | None = None,
        stream: str = AUDIT_STREAM,
        blocking: aioredis.Redis | None = None,
        blocking_slack: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        self._client = client
        # `after` blocks longer than `client`'s read timeout allows (`gateway.store.client.connect`).
        self._blocking = blocking if blocking is not None else client
        self._blocking_slack = blocking_slack
        self._stream = stream
        self._head_key = audit_keys(stream)["head"]
        self._secret = secret
        self._scripts: dict[str, Any] = {}
        """The append script, by the Lua of the write it carries along ("" for none), registered on first use."""
        self._head = GENESIS
        """The head this process last saw: right unless another process appended since."""
        self._lock: asyncio.Lock | None = None

    async def record(self, event: AuditEvent, *, along: Along | None = None) -> bool:
        """Append `event` to the chain; False (the event logged instead) when that is not possible.

        With `along`, that write lands in the same step as the entry, or (when False) neither does."""
        if event.code:  # every refusal is audited here, so here is where each is counted (by its code)
            count_refusal(event.action, event.code, _refusals(event))
        if self._secret is None:
            logger.error("audit sink has no chain secret; event: %s", event.to_fields())
            return False
        if self._lock is None:
            self._lock = asyncio.Lock()
        try:
            # One append in flight per process: concurrent appends from one head would all but one retry.
            async with self._lock:
                return await self._append_chained(event, self._secret, along)
        except (RedisError, OSError) as error:
            # The fallback is itself recorded, in the log, with the whole event.
            logger.error("audit stream unavailable (%s); event: %s", type(error).__name__, event.to_fields())
            return False

    async def _append_chained(self, event: AuditEvent, secret: bytes, along: Along | None) -> bool:
        fields = event.to_stored()
        lua, keys, extra = ("", (), ()) if along is None else (along.lua, along.keys, along.args)
        # What follows the head, the sequence number and the MAC, packed once for every attempt.
        tail = [str(len(extra)).encode(), *(str(arg).encode() for arg in extra)]
        tail += [part.encode() for pair in fields.items() for part in pair]
        packed, sizes = b"".join(tail), ",".join([str(len(part)) for part in tail])
        script = self._scripts.get(lua)
        if script is None:
            script = self._scripts[lua] = self._client.register_script(_APPEND % lua)
        for _attempt in range(_MAX_ATTEMPTS):
            seq = self._head.seq + 1
            mac = entry_mac(secret, self._head, seq, fields)
            head = (self._head.mac.encode(), str(seq).encode(), mac.encode())
            answer: Any = await script(
                keys=[self._stream, self._head_key, *keys],
                args=[b"".join((*head, packed)), f"{len(head[0])},{len(head[1])},{len(head[2])},{sizes}"],
            )
            if not isinstance(answer, list):  # the new entry's id
                self._head = ChainHead(mac=mac, seq=seq, id=_text(answer))
                return True
            self._head = ChainHead(mac=_text(answer[0]), seq=int(answer[1]), id=_text(answer[2]))
        logger.error("audit chain contended past %d attempts; event: %s", _MAX_ATTEMPTS, event.to_fields())
        return False

    async def head(self) -> ChainHead:
        """The chain head as Redis keeps it: the newest entry's MAC, sequence number and id."""
        stored: Any = await self._client.hmget(self._head_key, ["mac", "seq", "id"])
        mac, seq, entry_id = (_text(value) if value is not None else "" for value in stored)
        return ChainHead(mac=mac, seq=int(seq or 0), id=entry_id) if mac else GENESIS

    async def recent(self, count: int) -> list[AuditEvent]:
        entries: Any = await self._client.xrevrange(self._stream, count=count)
        return _events(reversed(entries or []))

    async def after(self, last_id: str, *, block_ms: int, count: int = 100) -> list[AuditEvent]:
        """Events newer than `last_id`, waiting up to `block_ms` for the first one (for `tail -f`)."""
        async with bounded_block(block_ms, self._blocking_slack):
            answer: Any = await self._blocking.xread({self._stream: last_id}, block=block_ms, count=count)
        return [event for _stream, entries in answer or [] for event in _events(entries)]

    async def entries(self, after_id: str, count: int) -> list[tuple[str, dict[str, str]]]:
        """Up to `count` entries (id, fields as stored, the chain's included) newer than `after_id`, oldest first."""
        answer: Any = await self._client.xrange(self._stream, min=f"({after_id}" if after_id else "-", count=count)
        return entry_fields(answer or [])


def _refusals(event: AuditEvent) -> int:
    """How many refusals `event` stands for: one, or an aggregated event's ``refusals`` (`gateway.flood_audit`)."""
    count = event.extra.get("refusals", "1")
    return int(count) if count.isdigit() else 1


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def entry_fields(entries: Iterable[tuple[Any, Any]]) -> list[tuple[str, dict[str, str]]]:
    """Stream entries as Redis answers them, decoded to text."""
    return [(_text(eid), {_text(k): _text(v) for k, v in fields.items()}) for eid, fields in entries]


def _events(entries: Iterable[tuple[Any, Any]]) -> list[AuditEvent]:
    return [AuditEvent.from_fields(eid, fields) for eid, fields in entry_fields(entries)]
