"""The audit trail in Redis: every allow, deny and outcome, appended to one hash-chained stream.

Entries are appended by one Lua script that reads the chain head, checks it is the one the MACs were
computed from, XADDs each entry in its compact form (`gateway.audit.codec`) with its MAC ``m`` and moves
the head, in one step (`gateway.audit.chain` says what the MAC covers). The entry's sequence number is
its stream id's second part, ``<ms>-<seq>``, so the id costs what ``*`` would and an entry read alone
still says its place in the chain. ``<ms>`` is the Redis server's time (never before the newest
entry's), as this process knows it from the last answer (its offset to the local clock, measured from
the send: an id is never behind the server's clock, at most a round trip ahead): the sink names the ids
itself, because each entry's MAC covers the id of the one before and appends made while one is in flight
go together, in one script call (up to `MAX_BATCH`), each entry its own link. Before the first answer an
append goes alone and the server picks its time. Only a stream that already holds a later id (an entry
not appended here) gets ``*`` and the number as a field ``q``; that entry ends its batch, and the ones
after it are MACed again. The MAC is computed here, not in Lua (Redis has no HMAC-SHA256), so the script
is a compare-and-set: when another process appended first it answers the new head and the batch is MACed
again. Every key shares the stream's slot: a key without braces hashes on its whole name, so
``{countersign:audit}:head`` lands with ``countersign:audit`` in Redis Cluster.

An append can carry one more write (`Along`, e.g. the call history's for an answered read): the
same script runs it after the head check and just before its entry's ``XADD``, so the two land
together in one round trip, or neither does (a failed write ends the batch before its entry; the
entries before it stand). Its keys must be in the stream's slot, or the deployment a single node
(Sentinel included), never a Cluster.

If the stream cannot be written, the event goes to the process log instead, so nothing is silent
even when Redis is down, and `record` answers False: the caller then refuses what it was auditing
(invariant 7: when Redis is gone, reads fail fast too, since the call can no longer be audited).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.audit.chain import GENESIS, ChainHead, entry_mac, head_seal
from gateway.audit.events import AUDIT_STREAM, AuditEvent
from gateway.store.client import DEFAULT_TIMEOUT_SECONDS, bounded_block, store_boundary
from gateway.telemetry.metrics import count_refusal

__all__ = ["Along", "RedisStreamAuditSink", "audit_keys", "entry_fields"]

logger = logging.getLogger(__name__)

_APPEND = """
local a, at = {}, 1
for size in string.gmatch(ARGV[2], '%%d+') do
  a[#a + 1] = string.sub(ARGV[1], at, at + tonumber(size) - 1)
  at = at + tonumber(size)
end
local us = redis.call('TIME')
us = tonumber(us[1]) * 1000000 + tonumber(us[2])
local now = math.floor(us / 1000)
local head = redis.call('HMGET', KEYS[2], 'mac', 'seq', 'id')
local newest = tonumber(string.match(head[3] or '', '^(%%d+)-') or '0')
local ms = tonumber(a[2]) or math.max(now, newest)
if (head[1] or '') ~= a[1] or ms < newest then
  return {0, head[1] or '', head[2] or '0', head[3] or '', us}
end
local function along(K, A)
%s
end
local i, k, id = 4, 3, ''
for e = 1, tonumber(a[3]) do
  local seq, mac, seal, keys, count = a[i], a[i + 1], a[i + 2], tonumber(a[i + 3]), tonumber(a[i + 4])
  local K, A = {}, {}
  for j = 1, keys do K[j] = KEYS[k + j - 1] end
  for j = 1, count do A[j] = a[i + 4 + j] end
  k, i = k + keys, i + 5 + count
  local args = {'XADD', KEYS[1], string.format('%%.0f-%%s', ms, seq)}
  for j = i + 1, i + tonumber(a[i]) do args[#args + 1] = a[j] end
  i = i + 1 + tonumber(a[i])
  args[#args + 1] = 'm'
  args[#args + 1] = mac
  local ok, failure = pcall(along, K, A)
  if not ok then
    return {1, e - 1, id, us, tostring(failure.err or failure)}
  end
  id = redis.pcall(unpack(args))
  if type(id) == 'table' and id.err then
    args[3] = '*'
    args[#args + 1] = 'q'
    args[#args + 1] = seq
    id = redis.call(unpack(args))
    redis.call('HSET', KEYS[2], 'mac', mac, 'seq', seq, 'id', id, 'seal', seal)
    return {1, e, id, us}
  end
  redis.call('HSET', KEYS[2], 'mac', mac, 'seq', seq, 'id', id, 'seal', seal)
end
return {1, tonumber(a[3]), id, us}
"""
"""Appends a batch of entries after one head check. ARGV: one string and its parts' byte sizes,
comma-separated, which the script cuts into ``a``: the head the MACs were computed from, the ``<ms>``
of every new id ('' for the server's time, clamped to the newest entry's: a batch of one), the
number of entries, then per entry its sequence number, MAC, the head's seal once it is appended
(`gateway.audit.chain.head_seal`), the number of its `Along` write's keys
(taken from KEYS[3] on, in entry order) and of its arguments, those arguments, and its stored fields
(a count, then names and values in turn). redis-py packs each argument of a command in turn, and
each costs it about a microsecond: 2 cost it less than the dozens these would be.

It answers ``{0, mac, seq, id, us}`` when the head is not the one the MACs were computed from
(nothing written), else ``{1, n, id, us}``: the first ``n`` entries appended and the last one's id.
Fewer than all were appended when an entry had to take ``*`` (the stream held a later id than it was
given: the next entries' MACs cover an id it does not have), or, with a fifth item, the error, when
the next entry's `Along` write failed (that entry is not appended). ``us`` is the server's time in
µs, from which the sink keeps its offset to the process clock. ``%s`` takes the `Along` write's Lua;
each entry's head is set as it is appended, so a script stopped by an error leaves a consistent
chain."""

_MAX_ATTEMPTS = 50
"""Rounds a batch is MACed again after another process moved the head first (each one round trip); rounds
that append some of it do not count."""
MAX_BATCH = 64
"""Entries appended by one script call at most: a bound on its run time and its argument."""


@dataclass(frozen=True, slots=True)
class Along:
    """A write sent in the same script as an append, after its head check and before its ``XADD``.

    `lua` is the body of a Lua function of ``K``, its keys, and ``A``, its arguments as strings (`keys`
    and `args`, in order); an error it raises stops the batch before its entry (the entry is not
    appended, the ones before it are). Its keys must share the stream's Cluster slot unless the
    deployment is a single node."""

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
        self._waiting: list[_Entry] = []
        """Entries recorded while a batch was in flight, for the next one."""
        self._offset_us: int | None = None
        """The server's clock minus this process's, in µs, as of the last answer (ids are the server's time):
        at most the call's round trip more than the true offset, never less."""

    async def record(self, event: AuditEvent, *, along: Along | None = None) -> bool:
        """Append `event` to the chain; False (the event logged instead) when that is not possible.

        With `along`, that write lands in the same step as the entry, or (when False) neither does.

        One batch is in flight per process (concurrent appends from one head would all but one retry):
        events recorded meanwhile wait, and the first of them to go on appends them all, in one script
        call per kind of `Along` write; each caller then reads its own event's answer."""
        if event.code:  # every refusal is audited here, so here is where each is counted (by its code)
            count_refusal(event.action, event.code, _refusals(event))
        if self._secret is None:
            logger.error("audit sink has no chain secret; event: %s", event.to_fields())
            return False
        if self._lock is None:
            self._lock = asyncio.Lock()
        entry = _Entry(event, along)
        self._waiting.append(entry)
        try:
            async with self._lock:
                if entry.appended is None:  # no batch before took it: this one takes every waiting entry
                    batch, self._waiting = self._waiting, []
                    await self._append_all(batch, self._secret)
        except asyncio.CancelledError:
            if entry in self._waiting:  # its caller is gone before it was sent: it is not appended
                self._waiting.remove(entry)
            raise
        return bool(entry.appended)

    async def _append_all(self, batch: list[_Entry], secret: bytes) -> None:
        """Append `batch`, setting every entry's `appended`: each `Along` kind's entries in their order."""
        try:
            runs: dict[str, list[_Entry]] = {}
            for entry in batch:
                runs.setdefault(entry.lua, []).append(entry)
            for lua, run in runs.items():
                await self._append_run(lua, run, secret)
        except (RedisError, OSError) as error:
            # The fallback is itself recorded, in the log, with the whole event.
            for entry in batch:
                if entry.appended is None:
                    entry.appended = False
                    logger.error(
                        "audit stream unavailable (%s); event: %s", type(error).__name__, entry.event.to_fields()
                    )
        finally:
            for entry in batch:  # cancelled mid-call: whether it landed is unknown, as after a timeout
                if entry.appended is None:
                    entry.appended = False
                    logger.error("audit append interrupted; event: %s", entry.event.to_fields())

    async def _append_run(self, lua: str, run: list[_Entry], secret: bytes) -> None:
        script = self._scripts.get(lua)
        if script is None:
            script = self._scripts[lua] = self._client.register_script(_APPEND % lua)
        waiting, stale_rounds = run, 0
        while waiting and stale_rounds < _MAX_ATTEMPTS:
            ms = self._id_ms()
            batch = waiting[: MAX_BATCH if ms else 1]  # the server's time: the next MAC would need the id
            macs, parts, keys = self._batch(batch, secret, ms)
            sizes = ",".join([str(len(part)) for part in parts])
            sent_us = _now_us()
            answer: Any = await script(keys=[self._stream, self._head_key, *keys], args=[b"".join(parts), sizes])
            stale = int(answer[0]) == 0
            # Measured from the send, the offset is never short of the true one (the server read its clock
            # after it), so ids are never behind the server's clock; 2 µs make up the two truncations.
            self._offset_us = int(answer[4] if stale else answer[3]) - sent_us + 2
            if stale:  # another process appended first: MAC them again on its head
                self._head = ChainHead(mac=_text(answer[1]), seq=int(answer[2]), id=_text(answer[3]))
                stale_rounds += 1
                continue
            done = int(answer[1])
            for entry in batch[:done]:
                entry.appended = True
            if done:
                self._head = ChainHead(mac=macs[done - 1], seq=self._head.seq + done, id=_text(answer[2]))
            if len(answer) > 4:  # the next entry's own write failed: it is not appended, the rest go on
                failed = batch[done]
                failed.appended = False
                logger.error("audit append refused (%s); event: %s", _text(answer[4]), failed.event.to_fields())
                done += 1
            waiting = waiting[done:]
        for entry in waiting:
            entry.appended = False
            logger.error("audit chain contended past %d attempts; event: %s", _MAX_ATTEMPTS, entry.event.to_fields())

    def _batch(self, batch: list[_Entry], secret: bytes, ms: str) -> tuple[list[str], list[bytes], list[str]]:
        """The MACs of `batch` chained from the head, the script's argument parts, and the `Along` keys."""
        head = self._head
        macs: list[str] = []
        keys: list[str] = []
        parts = [head.mac.encode(), ms.encode(), str(len(batch)).encode()]
        for entry in batch:
            seq = head.seq + 1
            mac = entry_mac(secret, head, seq, entry.fields)
            macs.append(mac)
            head = ChainHead(mac=mac, seq=seq, id=f"{ms}-{seq}")
            parts += [str(seq).encode(), mac.encode(), head_seal(secret, head).encode(), *entry.packed]
            keys += entry.keys
        return macs, parts, keys

    def _id_ms(self) -> str:
        """The ``<ms>`` of the next batch's ids: the server's time as the process clock and the offset last
        seen say, never before the head's; '' (the server decides) before any answer told the offset."""
        if self._offset_us is None:
            return ""
        newest = self._head.id.partition("-")[0]
        return str(max((_now_us() + self._offset_us) // 1000, int(newest) if newest.isdigit() else 0))

    async def head(self) -> ChainHead:
        """The chain head as Redis keeps it: the newest entry's MAC, sequence number and id."""
        return (await self.sealed_head())[0]

    async def sealed_head(self) -> tuple[ChainHead, str]:
        """The chain head as Redis keeps it, and its seal (`gateway.audit.chain.head_seal`; "" if it has none)."""
        stored: Any = await self._client.hmget(self._head_key, ["mac", "seq", "id", "seal"])
        mac, seq, entry_id, seal = (_text(value) if value is not None else "" for value in stored)
        return (ChainHead(mac=mac, seq=int(seq or 0), id=entry_id) if mac else GENESIS), seal

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


class _Entry:
    """One recorded event on its way into a batch, and its answer once the batch is done."""

    __slots__ = ("appended", "event", "fields", "keys", "lua", "packed")

    def __init__(self, event: AuditEvent, along: Along | None) -> None:
        self.event = event
        self.fields = event.to_stored()
        self.lua, self.keys, extra = ("", (), ()) if along is None else (along.lua, along.keys, along.args)
        # What follows the sequence number and the MAC among the script's argument parts, packed once.
        self.packed = [
            str(len(self.keys)).encode(),
            str(len(extra)).encode(),
            *(str(arg).encode() for arg in extra),
            str(2 * len(self.fields)).encode(),
            *(part.encode() for pair in self.fields.items() for part in pair),
        ]
        self.appended: bool | None = None


def _now_us() -> int:
    return time.time_ns() // 1000


def _refusals(event: AuditEvent) -> int:
    """How many refusals `event` stands for: one, or an aggregated event's ``refusals`` (`gateway.mcp.flood_audit`)."""
    count = event.extra.get("refusals", "1")
    return int(count) if count.isdigit() else 1


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def entry_fields(entries: Iterable[tuple[Any, Any]]) -> list[tuple[str, dict[str, str]]]:
    """Stream entries as Redis answers them, decoded to text."""
    return [(_text(eid), {_text(k): _text(v) for k, v in fields.items()}) for eid, fields in entries]


def _events(entries: Iterable[tuple[Any, Any]]) -> list[AuditEvent]:
    return [AuditEvent.from_fields(eid, fields) for eid, fields in entry_fields(entries)]
