"""Tell approvers a card is about to expire undecided: a scan of the ledger's timers, one notification per card.

Who runs it: `serve` and `worker`, beside notification delivery (`gateway.runtime.background`),
when a webhook is configured and ``[notifications] expiry_warning_seconds`` is not 0. What it asks:
the card `Ledger` (its timers and its clock), the `NotificationQueue` and the configured webhooks. It
moves no card: an expiring card is still PENDING and an approver can still decide it.

When a card is announced (`expiring`): it is PENDING and its decide-by is at most
`warn_ms` away, or at most half its decision window when that is shorter (a card proposed with
ten minutes to decide is not announced as expiring in the same breath as it is announced as new).

Each scan reads the timers due within the warning window, from now on (a PENDING card's timer is its
decide-by; cards whose timer is past are the worker's to expire), at most `batch` per ledger shard.
The notification's id is stable for a card, event and webhook (`notification_id`), and the outbox
enqueues an id once, so any number of processes may scan, each as often as it polls, and a card is
announced once per webhook. A card whose warning could not be queued (Redis failed) is tried again
on the next scan while it is still in the window.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from gateway.cards.card import Card, CardState
from gateway.cards.contract import Ledger
from gateway.errors import StoreUnavailableError
from gateway.notifications.message import NotificationEvent, NotificationQueue, NotificationSettings, Webhook, render

__all__ = ["ExpiryWarner", "expiring"]

logger = logging.getLogger(__name__)


def expiring(card: Card, *, now_ms: int, warn_ms: int) -> bool:
    """Whether `card` is to be announced as about to expire at `now_ms` (see the module's docstring)."""
    if card.state is not CardState.PENDING or warn_ms <= 0:
        return False
    left = card.decide_by_ms - now_ms
    window = card.decide_by_ms - card.created_ms
    return 0 < left <= min(warn_ms, window // 2)


class ExpiryWarner:
    """Enqueues `NotificationEvent.EXPIRING` for PENDING cards near their decide-by, once per card and webhook."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        queue: NotificationQueue,
        webhooks: Iterable[Webhook],
        console_url: str,
        warn_ms: int,
        batch: int = 500,
    ) -> None:
        self._ledger = ledger
        self._queue = queue
        self._webhooks = tuple(hook for hook in webhooks if NotificationEvent.EXPIRING in hook.events)
        self._console_url = console_url
        self._warn_ms = warn_ms
        self._batch = batch

    @classmethod
    def configured(
        cls, ledger: Ledger, queue: NotificationQueue, settings: NotificationSettings
    ) -> ExpiryWarner | None:
        """The warner of the ``[notifications]`` section; None when nothing would ever be sent (no webhook
        hears of expiring cards, or ``expiry_warning_seconds`` is 0)."""
        warner = cls(
            ledger,
            queue=queue,
            webhooks=settings.webhooks,
            console_url=settings.console_url,
            warn_ms=int(settings.expiry_warning_seconds * 1000),
        )
        return warner if warner._webhooks and warner._warn_ms > 0 else None

    async def warn_due(self) -> int:
        """One scan: enqueue a warning for every card now in its warning window. Returns how many were new.

        Raises:
            StoreUnavailableError: the ledger cannot be read (the loop retries; nothing was lost).
        """
        now = await self._ledger.server_time_ms()
        queued = 0
        for card_id in await self._ledger.due(now_ms=now + self._warn_ms, from_ms=now, limit=self._batch):
            card = await self._ledger.get(card_id)
            if card is None or not expiring(card, now_ms=now, warn_ms=self._warn_ms):
                continue
            queued += await self._announce(card)
        return queued

    async def _announce(self, card: Card) -> int:
        queued = 0
        for webhook in self._webhooks:
            if not webhook.wants(card, NotificationEvent.EXPIRING):
                continue
            notification = render(card, NotificationEvent.EXPIRING, webhook=webhook, console_url=self._console_url)
            try:
                queued += await self._queue.enqueue(notification)
            except StoreUnavailableError as error:  # the next scan tries again while the card is in the window
                logger.warning("expiry warning for %s not queued: %s", card.card_id, error.cause)
        return queued
