"""The notification delivery loop: take due notifications from the outbox, post them, reschedule failures.

Who runs it: `serve` and `worker`, in the background (`gateway.runtime.background`), never on a request's path:
a receiver that is down or slow delays only its own notifications. What it asks: the outbox
(`gateway.store.notification_outbox.RedisNotificationOutbox`), the configured webhooks by name, a `Post`
(`gateway.outbound.webhook.WebhookPoster`) and the audit sink. It decides nothing about which card
deserves a notification (`gateway.notifications.card_alerts` did).

Each attempt is signed afresh (a new timestamp) with the same notification id. A 2xx answer
finishes the notification; anything else, or no answer, reschedules it after
`policies.outcome.backoff_ms` (doubling from `retry_base_ms`, capped at `retry_cap_ms`) until
`max_attempts`, when it is abandoned. Delivered, retried and abandoned are audited.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Protocol

from gateway.audit.events import AuditEvent, AuditSink
from gateway.codes import Code
from gateway.errors import UpstreamError
from gateway.notifications.message import Notification, NotificationSettings, Webhook, signed_headers
from gateway.store.notification_outbox import RedisNotificationOutbox
from policies.outcome import backoff_ms

__all__ = ["Notifier", "Post"]


class Post(Protocol):
    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> int:
        """The receiver's status. Raises `UpstreamError` when there is none."""
        ...


class Notifier:
    """Delivers what the outbox holds, at least once per notification."""

    def __init__(
        self,
        outbox: RedisNotificationOutbox,
        webhooks: Mapping[str, Webhook],
        poster: Post,
        audit: AuditSink,
        *,
        max_attempts: int = 10,
        retry_base_ms: int = 1000,
        retry_cap_ms: int = 300_000,
        lease_ms: int = 30_000,
        batch: int = 16,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._outbox = outbox
        self._webhooks = webhooks
        self._poster = poster
        self._audit = audit
        self._max_attempts = max_attempts
        self._base_ms, self._cap_ms = retry_base_ms, retry_cap_ms
        self._lease_ms = lease_ms  # longer than a post's deadline: a live attempt is never taken twice
        self._batch = batch
        self._clock = clock

    @classmethod
    def configured(
        cls, outbox: RedisNotificationOutbox, settings: NotificationSettings, poster: Post, audit: AuditSink
    ) -> Notifier:
        """The notifier of the ``[notifications]`` section: its webhooks, attempts and backoff."""
        return cls(
            outbox,
            {hook.name: hook for hook in settings.webhooks},
            poster,
            audit,
            max_attempts=settings.max_attempts,
            retry_base_ms=int(settings.retry_base_seconds * 1000),
            retry_cap_ms=int(settings.retry_cap_seconds * 1000),
            lease_ms=int((settings.timeout_seconds + 5) * 1000),
        )

    async def deliver_due(self) -> int:
        """Deliver every notification due now, `batch` at a time, concurrently. Returns how many were tried."""
        tried = 0
        while True:
            taken = await self._outbox.take(limit=self._batch, lease_ms=self._lease_ms)
            await asyncio.gather(*(self._deliver(notification) for notification in taken))
            tried += len(taken)
            if len(taken) < self._batch:
                return tried

    async def _deliver(self, notification: Notification) -> None:
        webhook = self._webhooks.get(notification.webhook)
        if webhook is None:  # its webhook was removed from the configuration since
            await self._outbox.finish(notification.id)
            await self._record(notification, "abandoned", code=Code.NOT_FOUND, reason="webhook no longer configured")
            return
        headers = signed_headers(notification.id, notification.body, webhook.secret, int(self._clock()))
        try:
            status: int | None = await self._poster.post(webhook.url, notification.body.encode(), headers)
            why = f"HTTP {status}"
        except UpstreamError as error:
            status, why = None, str(error)
        if status is not None and 200 <= status < 300:
            await self._outbox.finish(notification.id)
            await self._record(notification, "delivered", attempts=notification.attempts + 1)
            return
        attempts = notification.attempts + 1
        if attempts >= self._max_attempts:
            await self._outbox.finish(notification.id)
            await self._record(notification, "abandoned", code=Code.UPSTREAM_UNAVAILABLE, reason=why, attempts=attempts)
            return
        delay = backoff_ms(attempts - 1, base_ms=self._base_ms, cap_ms=self._cap_ms)
        await self._outbox.reschedule(replace(notification, attempts=attempts), delay_ms=delay)
        await self._record(
            notification, "retry", code=Code.UPSTREAM_UNAVAILABLE, reason=why, attempts=attempts, delay_ms=delay
        )

    async def _record(
        self,
        notification: Notification,
        outcome: str,
        *,
        code: str = "",
        reason: str = "",
        attempts: int = 0,
        delay_ms: int | None = None,
    ) -> None:
        extra = {"notification_id": notification.id, "webhook": notification.webhook, "attempts": str(attempts)}
        if delay_ms is not None:
            extra["retry_in_ms"] = str(delay_ms)
        event = AuditEvent(
            action=f"notification.{outcome}",
            outcome="ok" if outcome == "delivered" else "error",
            code=code,
            reason=reason,
            extra=extra,
        )
        await self._audit.record(event)
