"""A principal's own approval cards (`LedgerCallerCards`): the one piece behind the built-in
approvals tools (views through the `CallerCards` Protocol) and MCP tasks (the cards themselves)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.cards.card import Card
from gateway.cards.contract import Ledger, Transition, TransitionStatus
from gateway.cards.views import card_for_agent
from gateway.principal import Principal, normalize_subject
from gateway.tools.context import CallerCards

__all__ = ["LedgerCallerCards"]


class LedgerCallerCards(CallerCards):
    """A caller's own cards. Anyone else's card answers exactly like one that does not exist."""

    def __init__(self, ledger: Ledger, principal: Principal) -> None:
        self._ledger = ledger
        self._principal = principal

    def _own(self, card: Card | None) -> Card | None:
        mine = (
            card is not None
            and card.requester_org == self._principal.org
            and normalize_subject(card.requester_subject) == normalize_subject(self._principal.subject)
        )
        return card if mine else None

    async def card(self, card_id: str) -> Card | None:
        """The caller's card `card_id`, or None (no such card, or someone else's)."""
        return self._own(await self._ledger.get(card_id))

    async def cards(self, limit: int) -> list[Card]:
        """The caller's most recent cards, newest first, at most `limit`."""
        own = (self._principal.org, self._principal.subject)
        cards = [card for card in await self._ledger.recent(limit=limit, requester=own) if self._own(card) is not None]
        return cards[:limit]

    async def withdraw(self, card_id: str) -> tuple[Card, Transition] | None:
        """Cancel the caller's card `card_id`: the card as found and the ledger's answer (None: not found).

        The ledger cancels only an open card (PENDING, APPROVED); any other state is refused, unchanged.
        """
        card = await self.card(card_id)
        if card is None:
            return None
        return card, await self._ledger.cancel(card_id, actor=self._principal.subject)

    async def status(self, card_id: str) -> Mapping[str, Any] | None:
        card = await self.card(card_id)
        return card_for_agent(card) if card is not None else None

    async def mine(self, limit: int) -> list[Mapping[str, Any]]:
        return [card_for_agent(card) for card in await self.cards(limit)]

    async def cancel(self, card_id: str) -> Mapping[str, Any] | None:
        withdrawn = await self.withdraw(card_id)
        if withdrawn is None:
            return None
        card, result = withdrawn
        if result.status is TransitionStatus.ERR_NOT_DURABLE:
            # Maybe applied, not confirmed: not acknowledged as done (ARCHITECTURE invariant 7).
            view = card_for_agent(card)
            view["cancelled"] = False
            view["note"] = "The ledger could not confirm the cancellation durable; check the card's status later."
            return view
        view = card_for_agent(result.card or card)
        view["cancelled"] = result.ok
        return view
