"""Which deferrals of an approved card are audited: the first for each reason, then one per interval.

A card that cannot run yet (the ledger not durable, its adapter unhealthy, no signing key) stays APPROVED
and the sweeper offers it again every few seconds; auditing every offer would write an entry per card
per retry for as long as the cause lasts (an operator's first signing key can be hours away). The audit
still says why each card waits: a deferral is recorded when its reason is new for the card, and again
once `AUDIT_EVERY_SECONDS` have passed, so a reader of the trail sees the wait go on. The memory is this
process's, bounded: another worker, or this one after a restart or after forgetting the card, records it
once more, which costs an entry, never a silent wait.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["AUDIT_EVERY_SECONDS", "DeferralLog"]

AUDIT_EVERY_SECONDS = 300.0
"""How often a deferral that goes on, for the same reason, is audited again."""
_CARDS = 10_000
"""Cards remembered at most; the least recently deferred is forgotten first."""


class DeferralLog:
    """Remembers the last audited deferral of each card: `due` says whether this one is to be audited."""

    def __init__(
        self,
        *,
        every_seconds: float = AUDIT_EVERY_SECONDS,
        max_cards: int = _CARDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._every = every_seconds
        self._max = max_cards
        self._clock = clock
        self._last: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def due(self, card_id: str, reason: str) -> bool:
        """True (and remembered) for a reason new for the card or one last audited an interval ago."""
        now = self._clock()
        last = self._last.get(card_id)
        if last is not None and last[0] == reason and now - last[1] < self._every:
            self._last.move_to_end(card_id)
            return False
        self._last[card_id] = (reason, now)
        self._last.move_to_end(card_id)
        while len(self._last) > self._max:
            self._last.popitem(last=False)
        return True

    def forget(self, card_id: str) -> None:
        """The card ran (or left APPROVED): a later deferral of it is audited as new."""
        self._last.pop(card_id, None)
