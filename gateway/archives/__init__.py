"""Append-only JSON-lines files on disk: what leaves Redis for good, fsynced before Redis lets go of it.

* `audit_archive` — the audit trail's archived batches (`AuditArchive`);
* `card_archive` — retired cards (`CardArchive`).

Each translates its own disk failures: an `OSError` leaves it as `gateway.errors.AuditArchiveError` or
`CardArchiveError` (both `ArchiveError`), naming the file or directory, never as a store error
(`on_disk`, beside `fsync_directory`, in `audit_archive`).

May import: the vocabulary and `gateway.audit`, `gateway.cards`; no Redis. Who calls it: the store's
archiver and card retention, and the CLI.
"""
