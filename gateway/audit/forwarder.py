"""The live audit export: every new audit entry posted, in batches, to a webhook (a SIEM's collector).

Who runs it: `serve` and `worker` in the background when ``[audit_export]`` names a URL
(`gateway.runtime.app`). What it asks: the trail (`gateway.store.audit_trail.AuditTrail`, archive included,
so an exporter that fell behind the stream's retention still sends every entry), the cursor and
lease (`gateway.store.audit_export.AuditExportCursor`), and the same `Post` and signature as the
notifications (`gateway.notifications.message.signed_headers`).

Each batch is one POST of JSON lines (`gateway.audit.formats.export_line`), with the delivery id
``aud_<first id>_<last id>``; the cursor moves past it only after a 2xx answer, so delivery is at
least once and in order. Receivers dedupe on each line's entry id (``id``, or OCSF ``metadata.uid``).
A refused or failed POST raises, and the loop (`gateway.runtime.background.run_forever`) tries again later.

A batch that ends at the chain head carries the head's checkpoint (`gateway.audit.chain.Checkpoint`, sealed under
the audit secret) as JSON in `CHECKPOINT_HEADER`, so the receiver holds, off the box, how far the trail reached:
kept as a file, ``audit verify --checkpoint`` with it finds the newest entries removed, which the trail alone,
its head put back by someone who kept an earlier sealed head, cannot show. A batch behind the head (the trail
moved on while it was read) carries none; the batch that catches up does.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

from gateway.audit.formats import AuditExportTarget, export_line
from gateway.errors import UpstreamUnavailableError
from gateway.notifications.delivery import Post
from gateway.notifications.message import signed_headers
from gateway.store.audit_export import AuditExportCursor
from gateway.store.audit_trail import AuditTrail
from gateway.telemetry.metrics import set_audit_export_backlog

__all__ = ["CHECKPOINT_HEADER", "AuditForwarder"]

CHECKPOINT_HEADER = "X-Countersign-Audit-Checkpoint"
"""The header of a batch ending at the chain head: that head's sealed checkpoint, as JSON."""


class AuditForwarder:
    """Sends the trail past the cursor to `target`, one batch at a time, while it holds the lease."""

    def __init__(
        self,
        trail: AuditTrail,
        cursor: AuditExportCursor,
        target: AuditExportTarget,
        poster: Post,
        *,
        product_version: str,
        lease_ms: int = 30_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._trail = trail
        self._cursor = cursor
        self._target = target
        self._poster = poster
        self._product_version = product_version
        self._lease_ms = lease_ms
        self._clock = clock
        self._token = secrets.token_hex(8)

    @property
    def poll_seconds(self) -> float:
        return self._target.poll_seconds

    async def forward_due(self) -> int:
        """Post every entry past the cursor; how many were sent. 0 while another process exports.

        Raises:
            UpstreamError: the receiver did not take a batch (the cursor stays where it was).
            StoreUnavailableError: Redis failed.
        """
        sent = 0
        while await self._cursor.hold(self._token, lease_ms=self._lease_ms):
            position = await self._cursor.position()
            entries = await self._trail.after(position, self._target.batch)
            # Set before the post, so a receiver that keeps refusing shows as a growing lag.
            oldest_ms = int(entries[0][0].partition("-")[0]) if entries else None
            set_audit_export_backlog(self._clock() - oldest_ms / 1000 if oldest_ms is not None else 0.0)
            if not entries:
                return sent
            lines = [
                export_line(eid, fields, format=self._target.format, product_version=self._product_version)
                for eid, fields in entries
            ]
            body = "".join(f"{line}\n" for line in lines)
            delivery = f"aud_{entries[0][0]}_{entries[-1][0]}"
            headers = signed_headers(
                delivery, body, self._target.secret, int(self._clock()), content_type="application/x-ndjson"
            )
            head = await self._trail.checkpoint()
            if head is not None and head.id == entries[-1][0]:
                headers[CHECKPOINT_HEADER] = head.to_json()
            status = await self._poster.post(self._target.url, body.encode(), headers)
            if not 200 <= status < 300:
                raise UpstreamUnavailableError(
                    f"audit export refused: HTTP {status}", service="audit-export", status=status
                )
            if not await self._cursor.advance(position, entries[-1][0]):
                return sent  # another process moved it (its lease had lapsed ours): it carries on
            sent += len(entries)
            if len(entries) < self._target.batch:
                return sent
        return sent
