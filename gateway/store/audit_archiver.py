"""Archive the audit stream's old entries to files, then trim them from Redis with ``XTRIM MINID``.

The stream grows by one entry per call; under ``noeviction`` a full Redis refuses every write, so
the stream is kept to the newest `keep_entries` entries, none older than `keep_minutes`. Nothing is
lost on the way: a batch is fsynced to a draft file, recorded as the checkpoint in Redis, committed
(renamed, directory fsynced), and only then trimmed, and only up to the checkpoint (never by
MAXLEN, which would drop whatever arrived meanwhile).

Several gateway processes may archive one Redis: a pass runs only under a lock holding a random
token, and the checkpoint moves by a compare-and-set that also checks the token is still the
lock's, so an archiver whose lock expired mid-pass discards its draft instead of archiving the
batch twice. A draft left by a process that stopped after the checkpoint moved is committed by
the next pass (the checkpoint names it); any other draft is discarded. The archive directory must
be shared by every process that archives.

Every pass, archiving or not, also checkpoints the chain head: the sealed head Redis keeps is written to
the archive directory (`AuditArchive.keep_checkpoint`, only ever moving forward), so a tail removed from
Redis later, head and all, is still found missing by ``audit verify``.

A pass fails with `StoreUnavailableError` when Redis does, and with `AuditArchiveError` (naming the
file) when the disk does; either way nothing is trimmed past what a committed file holds.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import redis.asyncio as aioredis

from gateway.archives.audit_archive import AuditArchive, Entry
from gateway.audit.chain import Checkpoint, stream_id
from gateway.audit.events import AUDIT_STREAM
from gateway.store.audit_stream import RedisStreamAuditSink, audit_keys, entry_fields
from gateway.store.client import store_boundary

__all__ = ["AuditArchiver"]

logger = logging.getLogger(__name__)

_ADVANCE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local current = redis.call('GET', KEYS[2]) or ''
if current ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[2], ARGV[3])
return 1
"""
"""Move the checkpoint from ARGV[2] to ARGV[3], only while the lock still holds our token ARGV[1]."""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@store_boundary
class AuditArchiver:
    """One archiving pass at a time, whichever process runs it (`archive_once`)."""

    def __init__(
        self,
        client: aioredis.Redis,
        archive: AuditArchive,
        *,
        keep_entries: int,
        keep_minutes: float,
        batch: int = 10_000,
        lock_seconds: float = 60.0,
        stream: str = AUDIT_STREAM,
    ) -> None:
        if keep_entries < 0 or keep_minutes < 0 or batch < 1:
            raise ValueError("audit retention must not be negative, and a batch holds at least one entry")
        self._client = client
        self._archive = archive
        self._keep_entries = keep_entries
        self._keep_ms = int(keep_minutes * 60_000)
        self.batch = batch
        self._lock_ms = int(lock_seconds * 1000)
        self._stream = stream
        self._heads = RedisStreamAuditSink(client, stream=stream)
        keys = audit_keys(stream)
        self._checkpoint_key, self._lock_key = keys["archived"], keys["archiver"]
        self._advance = client.register_script(_ADVANCE)
        self._release = client.register_script(_RELEASE)

    async def checkpoint(self) -> str:
        """The id of the newest archived entry ("" before the first pass)."""
        value: Any = await self._client.get(self._checkpoint_key)
        return _split(value)[0]

    async def archive_once(self) -> int:
        """Archive one batch of entries past the retention and trim them; the number archived.

        0 when another process holds the lock or nothing is past the retention. Call it again while
        it answers a full batch.
        """
        token = secrets.token_hex(8)
        if not await self._client.set(self._lock_key, token, nx=True, px=self._lock_ms):
            return 0
        try:
            return await self._pass(token)
        finally:
            await self._release(keys=[self._lock_key], args=[token])

    async def _pass(self, token: str) -> int:
        head, seal = await self._heads.sealed_head()
        if seal:  # read before the batch, so the checkpoint never claims an entry this pass did not see
            self._archive.keep_checkpoint(Checkpoint.of(head, seal))
        raw: Any = await self._client.get(self._checkpoint_key)
        stored = raw.decode() if isinstance(raw, bytes) else (raw or "")
        checkpoint, committed_name = _split(stored)
        self._recover(committed_name)
        if checkpoint:
            await self._trim_through(checkpoint)  # a pass that stopped before its trim
        entries = await self._past_retention(checkpoint)
        if not entries:
            return 0
        draft = self._archive.draft(entries, token)
        last_id = entries[-1][0]
        moved = await self._advance(
            keys=[self._lock_key, self._checkpoint_key],
            args=[token, stored, f"{last_id} {self._archive.final_name(draft)}"],
        )
        if not int(moved):
            # The lock expired and another archiver went on: its batch holds these entries.
            self._archive.discard(draft)
            logger.warning("audit archive pass lost its lock; discarded its batch of %d", len(entries))
            return 0
        self._archive.commit(draft)
        await self._trim_through(last_id)
        return len(entries)

    def _recover(self, committed_name: str) -> None:
        for draft in self._archive.drafts():
            if committed_name and self._archive.final_name(draft) == committed_name:
                self._archive.commit(draft)
            else:
                self._archive.discard(draft)

    async def _past_retention(self, checkpoint: str) -> list[Entry]:
        """The oldest unarchived entries past the retention, at most one batch: a prefix of the stream."""
        low = f"({checkpoint}" if checkpoint else "-"
        length = int(await self._client.xlen(self._stream))
        by_count = min(max(0, length - self._keep_entries), self.batch)
        by_age: list[Entry] = []
        if self._keep_ms:
            seconds, micros = await self._client.time()
            cutoff = int(seconds) * 1000 + int(micros) // 1000 - self._keep_ms
            if cutoff > 0:
                answer: Any = await self._client.xrange(self._stream, min=low, max=f"({cutoff}-0", count=self.batch)
                by_age = entry_fields(answer or [])
        if by_count <= len(by_age):
            return by_age
        answer = await self._client.xrange(self._stream, min=low, count=by_count)
        return entry_fields(answer or [])

    async def _trim_through(self, last_id: str) -> None:
        millis, seq = stream_id(last_id)
        await self._client.xtrim(self._stream, minid=f"{millis}-{seq + 1}", approximate=False)


def _split(value: Any) -> tuple[str, str]:
    text = value.decode() if isinstance(value, bytes) else (value or "")
    entry_id, _, name = text.partition(" ")
    return entry_id, name
