"""The audit trail's archive: append-only JSON-lines files in one directory, one file per archived batch.

A batch is written as a hidden draft (``.audit-….jsonl.<token>.tmp``) and fsynced; the archiver
then records it in Redis as the checkpoint and only then `commit`s it: renames it to
``audit-YYYYMMDD-HHMMSS-<first id>.jsonl`` (the time of its first entry, from the stream id) and
fsyncs the directory. Entries are trimmed from Redis only after that, so an entry is always in
Redis, or in a committed file, or both. Files are never rewritten; readers order them by the
stream id of their first entry. Each line is ``{"id": <stream id>, "fields": {...}}``, fields as
stored in the stream, in either version of the chain (`gateway.audit.codec`), chain fields included.

Beside the files, ``chain-checkpoint.json`` holds the newest sealed chain head an archiving pass saw
(`gateway.audit.chain.Checkpoint`), replaced atomically and only ever by a later one: wherever the stream's
tail goes, the trail must still reach it.

Who calls it: `gateway.store.audit_archiver` (writes), `gateway.store.audit_trail` (reads). Every
disk failure leaves it as an `AuditArchiveError` naming the file or directory, never as a bare `OSError`.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from gateway.audit.chain import Checkpoint, stream_id
from gateway.errors import ArchiveError, AuditArchiveError

__all__ = [
    "CHECKPOINT_NAME",
    "AuditArchive",
    "AuditArchiveError",
    "Entry",
    "fsync_directory",
    "on_disk",
    "read_checkpoint",
]

Entry = tuple[str, dict[str, str]]
"""A stream entry: its id and its fields."""

_SUFFIX = ".jsonl"
CHECKPOINT_NAME = "chain-checkpoint.json"


class AuditArchive:
    """The archive files of one directory (created on first write).

    Every method raises `AuditArchiveError` when the disk fails (the directory cannot be made, listed
    or synced, a file cannot be written, renamed or read)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def draft(self, entries: Sequence[Entry], token: str) -> Path:
        """Write `entries` (at least one, oldest first) to a fsynced draft; it is not part of the archive yet."""
        first_id = entries[0][0]
        millis = stream_id(first_id)[0]
        stamp = datetime.fromtimestamp(millis / 1000, UTC).strftime("%Y%m%d-%H%M%S")
        name = f"audit-{stamp}-{first_id}{_SUFFIX}"
        path = self.directory / f".{name}.{token}.tmp"
        with on_disk(AuditArchiveError, "write to the audit archive", path):
            self.directory.mkdir(parents=True, exist_ok=True)
            with path.open("x", encoding="utf-8") as handle:
                for entry_id, fields in entries:
                    record = {"id": entry_id, "fields": fields}
                    handle.write(json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
        return path

    @staticmethod
    def final_name(draft: Path) -> str:
        """The name `draft` gets once committed."""
        return draft.name[1:].rsplit(".", 2)[0]

    def commit(self, draft: Path) -> None:
        """Make `draft` part of the archive. Idempotent: a draft another process committed is left alone."""
        target = self.directory / self.final_name(draft)
        with on_disk(AuditArchiveError, "commit to the audit archive", target):
            try:
                os.rename(draft, target)
            except FileNotFoundError:
                if not target.exists():
                    raise
            fsync_directory(self.directory)

    def discard(self, draft: Path) -> None:
        """Remove `draft` without committing it; one already gone is fine."""
        with (
            on_disk(AuditArchiveError, "remove a draft of the audit archive", draft),
            contextlib.suppress(FileNotFoundError),
        ):
            draft.unlink()

    def drafts(self) -> list[Path]:
        """Drafts left by an archiver that stopped between writing and committing."""
        with on_disk(AuditArchiveError, "list the audit archive", self.directory):
            if not self.directory.is_dir():
                return []
            return sorted(self.directory.glob(f".audit-*{_SUFFIX}.*.tmp"))

    def files(self) -> list[Path]:
        """The committed files, oldest first."""
        with on_disk(AuditArchiveError, "list the audit archive", self.directory):
            if not self.directory.is_dir():
                return []
            found = [path for path in self.directory.glob(f"audit-*{_SUFFIX}") if path.is_file()]
        return sorted(found, key=_first_id)

    def entries(self) -> Iterator[tuple[Entry, str]]:
        """Every archived entry, oldest first, with where it is (``<file>:<line>``).

        A line that is not an entry is yielded with an id naming its place and no fields, so a
        check of the chain stops there rather than skipping it.
        """
        for path in self.files():
            yield from _read(path)

    def last(self, count: int) -> list[Entry]:
        """The newest `count` archived entries, oldest first (reads files from the newest back)."""
        found: list[Entry] = []
        for path in reversed(self.files()):
            if len(found) >= count:
                break
            found[:0] = [entry for entry, _where in _read(path)]
        return found[-count:] if count else []

    def checkpoint(self) -> Checkpoint | None:
        """The newest checkpoint kept here (None before the first); unreadable, it raises `AuditArchiveError`."""
        return read_checkpoint(self.directory / CHECKPOINT_NAME)

    def keep_checkpoint(self, checkpoint: Checkpoint) -> bool:
        """Replace the checkpoint with `checkpoint` when it is later (a higher sequence number), durably: written
        to a fsynced draft, renamed over the old one, the directory fsynced. Whether it was kept."""
        current = self.checkpoint()
        if current is not None and current.seq >= checkpoint.seq:
            return False
        path = self.directory / CHECKPOINT_NAME
        draft = self.directory / f".{CHECKPOINT_NAME}.tmp"
        with on_disk(AuditArchiveError, "write the audit checkpoint", path):
            self.directory.mkdir(parents=True, exist_ok=True)
            with draft.open("w", encoding="utf-8") as handle:
                handle.write(checkpoint.to_json() + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(draft, path)
            fsync_directory(self.directory)
        return True

    def last_id(self) -> str:
        """The id of the newest archived entry, or "" for an empty archive."""
        newest = self.last(1)
        return newest[0][0] if newest else ""


def read_checkpoint(path: Path) -> Checkpoint | None:
    """The checkpoint in `path` (None when there is no such file).

    Raises:
        AuditArchiveError: the file cannot be read, or is not a checkpoint.
    """
    with on_disk(AuditArchiveError, "read the audit checkpoint", path):
        if not path.exists():
            return None
        text = path.read_text(encoding="utf-8")
    try:
        return Checkpoint.from_json(text)
    except ValueError as error:
        raise AuditArchiveError(f"cannot read the audit checkpoint: {path}: {error}", path=path) from error


def fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable: it is on disk only once the directory entry is."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def on_disk(failure: type[ArchiveError], doing: str, path: Path) -> Iterator[None]:
    """Turn a disk failure while `doing` something with `path` into `failure`, naming the file or directory
    that failed: the `OSError`'s own, where it names one, else `path`."""
    try:
        yield
    except OSError as error:
        failed = Path(os.fsdecode(error.filename)) if error.filename is not None else path
        reason = f"{error.strerror or error} ({type(error).__name__})"
        raise failure(f"cannot {doing}: {failed}: {reason}", path=failed) from error


def _first_id(path: Path) -> tuple[int, int]:
    try:
        _prefix, millis, seq = path.name.removesuffix(_SUFFIX).rsplit("-", 2)
        return stream_id(f"{millis}-{seq}")
    except ValueError:
        return (0, 0)


def _read(path: Path) -> Iterator[tuple[Entry, str]]:
    with (
        on_disk(AuditArchiveError, "read the audit archive", path),
        path.open(encoding="utf-8", errors="replace") as handle,
    ):
        for number, line in enumerate(handle, start=1):
            where = f"{path.name}:{number}"
            try:
                record = json.loads(line)
                entry_id, fields = record["id"], record["fields"]
                if not isinstance(entry_id, str) or not isinstance(fields, dict):
                    raise TypeError
                yield (entry_id, {str(k): str(v) for k, v in fields.items()}), where
            except (ValueError, KeyError, TypeError):
                yield (where, {}), where
