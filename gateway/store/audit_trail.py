"""The whole audit trail as one sequence: the archive files, then the Redis stream past them.

An entry stays in the stream until some time after it is archived, so the stream is read only
past the newest archived id: each entry is read exactly once, in order. `verify` replays the
hash chain over that sequence (`gateway.audit.chain`) and compares its end with the chain head
Redis keeps (and its seal), and with every checkpoint: the archive's own and any the caller brings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from gateway.archives.audit_archive import CHECKPOINT_NAME, AuditArchive, Entry
from gateway.audit.chain import GENESIS, ChainBreak, ChainCheck, Checkpoint, stream_id
from gateway.audit.events import AuditEvent
from gateway.store.audit_stream import RedisStreamAuditSink

__all__ = ["AuditTrail", "Verdict"]

_PAGE = 1000


@dataclass(frozen=True, slots=True)
class Verdict:
    """What `AuditTrail.verify` found: how many entries it read, and the first break if any."""

    archived: int
    live: int
    broken: ChainBreak | None
    where: str = ""
    """The broken entry's place: ``<file>:<line>`` in the archive, or ``stream``."""


class AuditTrail:
    """Reads archive and stream together. Raises `StoreUnavailableError` when Redis does not answer."""

    def __init__(self, stream: RedisStreamAuditSink, archive: AuditArchive) -> None:
        self._stream = stream
        self._archive = archive

    async def live(self, after_id: str) -> AsyncIterator[Entry]:
        """Stream entries newer than `after_id`, oldest first, a page at a time."""
        last = after_id
        while page := await self._stream.entries(last, _PAGE):
            for entry in page:
                yield entry
            last = page[-1][0]

    async def entries(self) -> AsyncIterator[Entry]:
        """Every entry ever appended and not removed, oldest first, each once."""
        last = ""
        for entry, _where in self._archive.entries():
            last = entry[0]
            yield entry
        async for entry in self.live(last):
            yield entry

    async def after(self, after_id: str, limit: int) -> list[Entry]:
        """Up to `limit` entries newer than `after_id` (``""``: from the first), archive then stream, oldest first.

        The archive is read only while `after_id` is older than its newest entry (an exporter catching up)."""
        found: list[Entry] = []
        archived_last = self._archive.last_id()
        if archived_last and (not after_id or _newer(archived_last, after_id)):
            for entry, _where in self._archive.entries():
                if after_id and not _newer(entry[0], after_id):
                    continue
                found.append(entry)
                if len(found) >= limit:
                    return found
            after_id = archived_last
        return found + await self._stream.entries(after_id, limit - len(found))

    async def recent(self, count: int) -> list[AuditEvent]:
        """The newest `count` events, oldest first, from the stream and, when it holds fewer, the archive."""
        archived_last = self._archive.last_id()
        newest = [
            event for event in await self._stream.recent(count) if not archived_last or _newer(event.id, archived_last)
        ]
        missing = count - len(newest)
        older = self._archive.last(missing) if missing > 0 and count else []
        return [AuditEvent.from_fields(eid, fields) for eid, fields in older] + newest

    async def checkpoint(self) -> Checkpoint | None:
        """The chain head as Redis keeps it now, sealed, to keep elsewhere (None before the first entry, or when
        the head has no seal)."""
        head, seal = await self._stream.sealed_head()
        return Checkpoint.of(head, seal) if seal else None

    async def verify(self, secret: bytes, checkpoints: Mapping[str, Checkpoint] | None = None) -> Verdict:
        """Replay the chain from the first entry; the first entry changed, removed, added or moved, the newest
        ones included: against the sealed head, the archive's checkpoint and `checkpoints` (by where kept).

        Raises:
            AuditArchiveError: the archive or its checkpoint cannot be read.
        """
        kept = dict(checkpoints or {})
        if (own := self._archive.checkpoint()) is not None:
            kept[CHECKPOINT_NAME] = own
        check = ChainCheck(secret, kept)
        archived = live = 0
        last = ""
        for (entry_id, fields), where in self._archive.entries():
            archived += 1
            last = entry_id
            check.add(entry_id, fields)
            if check.broken is not None:
                return Verdict(archived=archived, live=live, broken=check.broken, where=where)
        head, seal = GENESIS, ""
        # A live trail grows while it is read: entries appended after the stream was read, before the head was,
        # are read too (their head came with them), a bounded number of times, so no append reads as truncation.
        for _round in range(_CATCH_UP_ROUNDS):
            async for entry_id, fields in self.live(last):
                live += 1
                last = entry_id
                check.add(entry_id, fields)
                if check.broken is not None:
                    return Verdict(archived=archived, live=live, broken=check.broken, where="stream")
            head, seal = await self._stream.sealed_head()
            if head.seq <= check.head.seq:
                break
        broken = check.finish(head, seal)
        return Verdict(archived=archived, live=live, broken=broken, where="stream" if broken else "")


_CATCH_UP_ROUNDS = 5
"""Times `AuditTrail.verify` reads on past the stream's end when the head moved meanwhile: appends are bursts."""


def _newer(entry_id: str, than: str) -> bool:
    return stream_id(entry_id) > stream_id(than)
