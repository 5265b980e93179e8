"""The archive of retired cards: append-only JSON-lines files in one directory, one file per batch.

Who writes it: `gateway.store.ledger.retention`, before it removes a batch of finished cards from
Redis. Who reads it: `countersign cards archived` (`find`). A batch is written to a hidden draft
(``.cards-….jsonl.<token>.tmp``), fsynced, renamed to ``cards-YYYYMMDD-HHMMSS-<token>.jsonl``
(the time it was written) and the directory fsynced; only then are its cards removed from Redis.
So a card is always in Redis, or in a committed file, or both. A card archived twice (a sweep that
stopped between the rename and the removal, or two sweeps at once) has one line per copy;
readers take the copy of the highest version.

Each line is ``{"card_id": ..., "version": ..., "card": {...}}``, the card as `card_record` gives it:
every field and every event, the hash chain included, so an archived card's history can be checked
(`gateway.cards.card.verify_chain`) as a stored one's can.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.archives.audit_archive import fsync_directory, on_disk
from gateway.errors import CardArchiveError

__all__ = ["CardArchive", "CardArchiveError", "card_record"]

_PREFIX, _SUFFIX = "cards-", ".jsonl"
STALE_DRAFT_SECONDS = 3600.0
"""A draft older than this was left by a sweep that stopped before its rename (none takes an hour):
its cards are still in Redis, so it is removed."""


def card_record(card: Mapping[str, Any]) -> dict[str, Any]:
    """The archived form of an expanded card (`gateway.store.ledger.codec.decode_card`): one JSON object."""
    return {"card_id": card["card_id"], "version": int(card["version"]), "card": dict(card)}


class CardArchive:
    """The archived cards of one directory (created on first write).

    Every method raises `CardArchiveError` when the disk fails (the directory cannot be made or listed, a
    file cannot be written or read), naming the file or directory."""

    def __init__(self, directory: Path, *, clock: Any = time.time) -> None:
        self.directory = directory
        self._clock = clock

    def write(self, records: Sequence[Mapping[str, Any]], token: str) -> Path:
        """Commit `records` (at least one) as one new file, fsynced with its directory entry.

        Raises:
            CardArchiveError: the directory or the file cannot be written; nothing is committed then.
        """
        stamp = datetime.fromtimestamp(self._clock(), UTC).strftime("%Y%m%d-%H%M%S")
        name = f"{_PREFIX}{stamp}-{token}{_SUFFIX}"
        draft, target = self.directory / f".{name}.tmp", self.directory / name
        with on_disk(CardArchiveError, "write the card archive", draft):
            self.directory.mkdir(parents=True, exist_ok=True)
            with draft.open("x", encoding="utf-8") as handle:
                for record in records:
                    handle.write(json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.rename(draft, target)
            fsync_directory(self.directory)
        return target

    def remove_stale_drafts(self) -> int:
        """Remove the drafts older than `STALE_DRAFT_SECONDS`; how many there were."""
        with on_disk(CardArchiveError, "list the card archive", self.directory):
            if not self.directory.is_dir():
                return 0
            drafts = list(self.directory.glob(f".{_PREFIX}*{_SUFFIX}.tmp"))
        removed = 0
        for draft in drafts:
            try:
                if self._clock() - draft.stat().st_mtime > STALE_DRAFT_SECONDS:
                    draft.unlink()
                    removed += 1
            except OSError:  # another sweep removed it first, or it cannot be: the next sweep tries again
                continue
        return removed

    def files(self) -> list[Path]:
        """The committed files, oldest first (by name: the time each was written)."""
        with on_disk(CardArchiveError, "list the card archive", self.directory):
            if not self.directory.is_dir():
                return []
            return sorted(path for path in self.directory.glob(f"{_PREFIX}*{_SUFFIX}") if path.is_file())

    def records(self) -> Iterator[dict[str, Any]]:
        """Every archived copy, oldest file first; lines that are not a card record (a card and an integer
        version) are skipped."""
        for path in self.files():
            with (
                on_disk(CardArchiveError, "read the card archive", path),
                path.open(encoding="utf-8", errors="replace") as handle,
            ):
                for line in handle:
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    if (
                        isinstance(record, dict)
                        and isinstance(record.get("card"), dict)
                        and isinstance(record.get("version"), int)
                    ):
                        yield record

    def find(self, card_id: str) -> dict[str, Any] | None:
        """The newest archived copy of `card_id` (its highest version), or None."""
        found: dict[str, Any] | None = None
        for record in self.records():
            if record.get("card_id") == card_id and (found is None or record["version"] > found["version"]):
                found = record
        return found["card"] if found is not None else None
