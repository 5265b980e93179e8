"""A demo backend's state on disk: one JSON document, replaced atomically after every write.

`countersign serve` in demo mode gives each backend it starts ``<data_dir>/backends/<name>.json``,
so a restart keeps what the backends did: a SUCCEEDED card still points at a booking that exists,
and a status query by idempotency key still finds its answer. Without a file (tests, scripts) a
backend lives in memory only, as before.

The document is written to a temporary file in the same directory, fsynced, and renamed over the
old one, then the directory is fsynced: a crash leaves the old document or the new one, never half
of one. A document this module cannot read is refused at start (`StateFileError`) rather than
silently replaced by the seed data, which would forget writes the gateway has recorded as done.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "StateFile", "StateFileError"]

FORMAT = 1
"""The document's ``format``; a document of another format is refused."""


class StateFileError(RuntimeError):
    """The state file exists but cannot be read as this backend's state."""


class StateFile:
    """Where one backend keeps its state between runs."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Any] | None:
        """The saved document, or None when nothing was saved yet.

        Raises:
            StateFileError: the file is unreadable, not JSON, or of another format.
        """
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as error:
            raise StateFileError(f"cannot read {self.path}: {error}") from error
        try:
            document = json.loads(text)
        except ValueError as error:
            raise StateFileError(f"{self.path} is not JSON: {error}") from error
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise StateFileError(f"{self.path} is not a format-{FORMAT} backend state document")
        return document

    def save(self, document: Mapping[str, Any]) -> None:
        """Replace the saved document with `document` (plus its ``format``), atomically and durably."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        draft = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}.tmp")
        try:
            with open(draft, "w", encoding="utf-8") as handle:
                json.dump({**document, "format": FORMAT}, handle, ensure_ascii=False, separators=(",", ":"))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(draft, self.path)
        except BaseException:
            draft.unlink(missing_ok=True)
            raise
        # The rename is durable only once the directory entry is.
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
