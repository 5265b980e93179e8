"""The background loops of a gateway process, assembled in one place: what runs beside the requests.

Who calls it: `gateway.runtime.app` (the lifespan of ``countersign serve``) and `gateway.runtime.serve.run_worker`
(``countersign worker``) start every coroutine `background_loops` returns and cancel them at shutdown. What
each step does is its own concern's: the live tool source (`gateway.registry.live`), the health checks
(`gateway.ops.health`), the audit archive (`gateway.store.audit_archiver`), card retention
(`gateway.store.ledger.retention`), the signing keys (`gateway.signing.signer`), notification delivery
(`gateway.notifications.delivery`), expiry warnings (`gateway.notifications.expiry_warnings`) and the live
audit export (`gateway.audit.forwarder`). This module only says which run, how often, and which errors
are expected. The worker itself is not one of them: `serve` starts it beside these, `worker` runs it alone.

Every loop runs one step forever (`run_forever`). A step that fails with one of its expected errors is
logged and run again after `retry_seconds`; any other exception is a bug, logged with its traceback, and
the loop goes on (a background loop that dies silently is worse than one that logs). Cancellation always
ends the loop, even when a library under the step turned the cancellation into its own error on the way
out (redis-py reports a connection cut by a cancel as ``ConnectionError``, or swallows it): the loop checks
`Task.cancelling()` after every step, so a stop request is never lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from gateway.archives.audit_archive import AuditArchive
from gateway.archives.card_archive import CardArchive
from gateway.audit.events import AuditSink
from gateway.audit.forwarder import AuditForwarder
from gateway.config.settings import Settings
from gateway.errors import ArchiveError, StoreUnavailableError, UpstreamError
from gateway.notifications.delivery import Notifier
from gateway.notifications.expiry_warnings import ExpiryWarner
from gateway.ops.health import AdapterHealth
from gateway.registry.live import LiveToolSource
from gateway.signing.signer import CACHE_SECONDS, Signer
from gateway.store.audit_archiver import AuditArchiver
from gateway.store.ledger.retention import RedisCardRetention, keep_ms_of

__all__ = ["Steps", "archive_audit", "audit_archiver", "background_loops", "card_retention", "run_forever"]

logger = logging.getLogger(__name__)

Loop = Coroutine[Any, Any, None]
Step = Callable[[], Awaitable[object]]


class Steps(Protocol):
    """The wired parts whose steps run in the background (`gateway.runtime.app.Gateway` has them all)."""

    @property
    def live(self) -> LiveToolSource: ...
    @property
    def health(self) -> AdapterHealth: ...
    @property
    def archiver(self) -> AuditArchiver: ...
    @property
    def retention(self) -> RedisCardRetention: ...
    @property
    def signer(self) -> Signer: ...
    @property
    def notifier(self) -> Notifier | None: ...
    @property
    def warner(self) -> ExpiryWarner | None: ...
    @property
    def forwarder(self) -> AuditForwarder | None: ...


def background_loops(gateway: Steps, settings: Settings, *, serving: bool) -> dict[str, Loop]:
    """Every background loop of one process, by name: those of ``serve`` when `serving`, else the worker's.

    Only a gateway that serves requests refreshes its tool source and checks its backends' health (both
    feed requests); both kinds keep the audit stream and the cards within their retention, refresh the
    signing keys, and deliver notifications, expiry warnings and the live audit export when configured.
    """
    store = (StoreUnavailableError,)
    loops: dict[str, Loop] = {}

    def add(what: str, step: Step, seconds: float, expected: tuple[type[Exception], ...] = store) -> None:
        loops[what] = run_forever(step, what=what, pause_seconds=seconds, retry_on=expected)

    if serving:
        add("tool source refresh", gateway.live.refresh, settings.registry_poll_seconds, (*store, UpstreamError))
        add("health check", gateway.health.check_once, settings.health_poll_seconds, (*store, UpstreamError))
    add(
        "audit archive", lambda: archive_audit(gateway.archiver), settings.audit_archive_seconds, (*store, ArchiveError)
    )
    add("card retention", gateway.retention.sweep, settings.card_retention_seconds, (*store, ArchiveError))
    add("signing keys refresh", gateway.signer.poll, CACHE_SECONDS, (*store, UpstreamError))
    if gateway.notifier is not None:
        add("notification delivery", gateway.notifier.deliver_due, settings.notifications.poll_seconds)
    if gateway.warner is not None:
        add("expiry warnings", gateway.warner.warn_due, settings.notifications.poll_seconds)
    if gateway.forwarder is not None:
        every = gateway.forwarder.poll_seconds
        # A refused export batch is tried again at the next poll, not sooner; catching up reads the archive.
        loops["audit export"] = run_forever(
            gateway.forwarder.forward_due,
            what="audit export",
            pause_seconds=every,
            retry_on=(*store, UpstreamError, ArchiveError),
            retry_seconds=every,
        )
    return loops


def audit_archiver(client: Any, settings: Settings) -> AuditArchiver:
    """The archiver of the audit stream, with the retention and archive directory of `settings`."""
    return AuditArchiver(
        client,
        AuditArchive(settings.archive_dir),
        keep_entries=settings.audit_keep_entries,
        keep_minutes=settings.audit_keep_minutes,
    )


async def archive_audit(archiver: AuditArchiver) -> None:
    """Archive and trim until nothing is past the retention (one batch per call of `archive_once`)."""
    while await archiver.archive_once() >= archiver.batch:
        pass


def card_retention(client: Any, settings: Settings, audit: AuditSink) -> RedisCardRetention:
    """The retention of `settings` (`card_keep_days`, `cards_dir`) over the cards of `client`."""
    return RedisCardRetention(
        client, CardArchive(settings.cards_dir), keep_ms=keep_ms_of(settings.card_keep_days), audit=audit
    )


async def run_forever(
    step: Step,
    *,
    what: str,
    pause_seconds: float,
    retry_on: tuple[type[Exception], ...],
    retry_seconds: float = 1.0,
) -> None:
    """Run `step`, then wait `pause_seconds`, until cancelled."""
    task = asyncio.current_task()
    while True:
        wait = pause_seconds
        try:
            await step()
        except retry_on as error:
            logger.warning("%s failed (%s: %s); retrying", what, type(error).__name__, error)
            wait = retry_seconds
        except Exception:
            logger.exception("%s failed unexpectedly; continuing", what)
            wait = retry_seconds
        _stop_if_cancelled(task)
        if wait:
            await asyncio.sleep(wait)


def _stop_if_cancelled(task: asyncio.Task[object] | None) -> None:
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
