"""Keep the audit stream within its retention: the archiver `serve` and `worker` run in the background.

Who calls it: the composition root (`gateway.app`) builds the archiver, `serve` and `create_app`'s
lifespan run `audit_loop`. The archiving itself (what moves to the archive, and the trim) is
`gateway.store.audit_archiver`'s.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from gateway.audit_archive import AuditArchive
from gateway.errors import StoreUnavailableError
from gateway.loops import run_forever
from gateway.settings import Settings
from gateway.store.audit_archiver import AuditArchiver

__all__ = ["archive_audit", "audit_archiver", "audit_loop"]


def audit_archiver(client: Any, settings: Settings) -> AuditArchiver:
    """The archiver of the audit stream, with the retention and archive directory of `settings`."""
    return AuditArchiver(client, AuditArchive(settings.archive_dir), keep_entries=settings.audit_keep_entries,
                         keep_minutes=settings.audit_keep_minutes)  # fmt: skip


async def archive_audit(archiver: AuditArchiver) -> None:
    """Archive and trim until nothing is past the retention (one batch per call of `archive_once`)."""
    while await archiver.archive_once() >= archiver.batch:
        pass


def audit_loop(archiver: AuditArchiver, settings: Settings) -> Coroutine[Any, Any, None]:
    """The background loop that keeps the audit stream within its retention (`serve` and `worker`)."""
    return run_forever(
        lambda: archive_audit(archiver),
        what="audit archive",
        pause_seconds=settings.audit_archive_seconds,
        retry_on=(StoreUnavailableError, OSError),
    )
