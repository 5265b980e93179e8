"""Append-only JSON-lines files on disk: what leaves Redis for good, fsynced before Redis lets go of it.

* `audit_archive` — the audit trail's archived batches (`AuditArchive`);
* `card_archive` — retired cards (`CardArchive`).

May import: the vocabulary and `gateway.audit`, `gateway.cards`; no Redis (a disk failure here is an
archive error, not a store one). Who calls it: the store's archiver and card retention, and the CLI.
"""
