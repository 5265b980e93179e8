"""One admin's view of the ledger's changes: each card of their org that changed, as a list row.

Who calls it: `gateway.approvals.service.CardService.watch` makes one per subscriber (the admin API's
event stream). It asks the ledger's change feed (`gateway.cards.contract.CardChanges`) what changed, and
the ledger for the card as it is now; it deliberately sends nothing itself and knows nothing of
HTTP. A change of another org's card is skipped before the card is read, so one admin's watch never
learns that another org's card exists, and a card is shown only under the rule that shows it in the
list (`visible_to`).
"""

from __future__ import annotations

import time

from gateway.cards.card import Card
from gateway.cards.contract import ChangeSubscription, Ledger
from gateway.cards.views import AdminCardSummary
from gateway.codes import Code
from gateway.principal import KeyKind, Principal
from policies.approval import may_decide

__all__ = ["CardWatch", "visible_to"]


def visible_to(card: Card, admin: Principal) -> bool:
    """Same rule as deciding, minus the role: any admin of the card's org may read it."""
    return may_decide(card, admin).code is not Code.NOT_FOUND


class CardWatch:
    """The changed cards `admin` may see, one at a time, in the order the ledger announced them."""

    def __init__(self, ledger: Ledger, subscription: ChangeSubscription, admin: Principal) -> None:
        self._ledger = ledger
        self._subscription = subscription
        self._admin = admin

    async def next(self, timeout: float) -> AdminCardSummary | None:
        """The next changed card (as it is when read, which may be newer than the change), or None
        when none came within `timeout` seconds.

        Raises:
            StoreUnavailableError: Redis stopped answering; changes may have been missed.
        """
        until = time.monotonic() + timeout
        while (left := until - time.monotonic()) > 0:
            change = await self._subscription.next_change(left)
            if change is None:
                return None
            if self._admin.kind is not KeyKind.ADMIN or change.org != self._admin.org:
                continue
            card = await self._ledger.get(change.card_id)
            if card is not None and visible_to(card, self._admin):
                return AdminCardSummary.from_card(card)
        return None
