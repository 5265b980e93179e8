"""Keep Redis within the card retention: the sweep `serve` and `worker` run in the background.

Who calls it: the composition root (`gateway.app`) builds the retention; `create_app`'s lifespan (so
``countersign serve``) and ``countersign worker`` (`gateway.serve.run_worker`) run `retention_loop`.
What leaves Redis, and the checks before it does, is `gateway.store.card_retention`'s.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from gateway.audit import AuditSink
from gateway.card_archive import CardArchive, CardArchiveError
from gateway.errors import StoreUnavailableError
from gateway.loops import run_forever
from gateway.settings import Settings
from gateway.store.card_retention import RedisCardRetention, keep_ms_of

__all__ = ["card_retention", "retention_loop"]


def card_retention(client: Any, settings: Settings, audit: AuditSink) -> RedisCardRetention:
    """The retention of `settings` (`card_keep_days`, `cards_dir`) over the cards of `client`."""
    return RedisCardRetention(client, CardArchive(settings.cards_dir), keep_ms=keep_ms_of(settings.card_keep_days),
                              audit=audit)  # fmt: skip


def retention_loop(retention: RedisCardRetention, settings: Settings) -> Coroutine[Any, Any, None]:
    """The background loop that moves finished cards past their retention to the archive."""
    return run_forever(
        retention.sweep,
        what="card retention",
        pause_seconds=settings.card_retention_seconds,
        retry_on=(StoreUnavailableError, CardArchiveError),
    )
