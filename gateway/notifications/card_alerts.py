"""Tell people about the cards they can act on: a `Ledger` that enqueues a notification after a transition.

Who uses it: the composition root wraps the ledger it gives the executor, the card service and the
worker in `AlertingLedger`, so every path that moves a card (a proposal, a worker's outcome, a
status query, a recovery) is covered without any of them knowing. What it asks: a `Ledger` to
delegate to, the configured `Webhook`s, and a `NotificationQueue` (the Redis outbox).

When a transition answers ``OK`` and leaves the card in one of `NOTIFIED_STATES` (PENDING: a
decision is needed; FAILED, UNKNOWN, NEEDS_RECONCILIATION: a write ended where a person may have
to look), one notification per interested webhook is enqueued, after the ledger acknowledged the
transition. What that means for delivery: from the moment it is enqueued a notification is
delivered at least once; a process that dies (or a Redis that fails) between the acknowledged
transition and the enqueue loses that one notification, and the card is still in the console.
Transitions made by a person (approve, reject, cancel, resolve) notify nobody: that person knows.
A new card a policy rule is asked about (`Proposal.awaits_policy`) is announced by the rules' step
(`gateway.executor.policy_approvals`, through `alert`) once it is clear a person must act, so no
approver is called to a card a rule approved a moment later.

An enqueue that fails is logged and never fails the transition: the card exists, and a tool call
must not be refused because a notification could not be queued.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from gateway.cards.card import CardState
from gateway.cards.contract import Ledger, Proposal, Transition, TransitionStatus
from gateway.errors import StoreUnavailableError
from gateway.notifications.message import NOTIFIED_STATES, NotificationQueue, Webhook, render

__all__ = ["DELEGATED", "AlertingLedger"]

DELEGATED = frozenset({
    "approve", "approve_by_policy", "reject", "cancel", "resolve", "claim", "claim_resend",
    "get", "repeated", "events", "recent", "page", "due", "server_time_ms",
    "ensure_outbox_group", "outbox_shards", "read_outbox", "ack",
})  # fmt: skip
"""The `Ledger` methods `AlertingLedger` hands to its ledger untouched: a person's transitions (that person
knows), a claim (nothing a person must act on yet), and every read."""

logger = logging.getLogger(__name__)


class AlertingLedger:
    """`ledger`, plus a notification for every card that lands where a person must act."""

    def __init__(
        self, ledger: Ledger, *, queue: NotificationQueue, webhooks: Iterable[Webhook], console_url: str
    ) -> None:
        self._ledger = ledger
        self._queue = queue
        self._webhooks = tuple(webhooks)
        self._console_url = console_url

    async def alert(self, result: Transition) -> Transition:
        """Enqueue what `result` calls for (nothing unless it is OK and its card is where a person must act)."""
        card = result.card
        if result.status is not TransitionStatus.OK or card is None:
            return result
        event = NOTIFIED_STATES.get(card.state)
        if event is None:
            return result
        for webhook in self._webhooks:
            if not webhook.wants(card, event):
                continue
            try:
                await self._queue.enqueue(render(card, event, webhook=webhook, console_url=self._console_url))
            except StoreUnavailableError as error:
                logger.warning("notification of %s on %s not queued: %s", event.value, card.card_id, error.cause)
        return result

    # -- transitions that may need a person --------------------------------------------------------

    async def propose(self, proposal: Proposal) -> Transition:
        result = await self._ledger.propose(proposal)
        # A card a policy rule is about to consider is announced after the rules had their say, if at all.
        return result if proposal.awaits_policy else await self.alert(result)

    async def complete(
        self,
        card_id: str,
        *,
        fence: int,
        outcome: CardState,
        reference: str,
        evidence: Mapping[str, Any],
        settle_ms: int,
    ) -> Transition:
        return await self.alert(
            await self._ledger.complete(
                card_id, fence=fence, outcome=outcome, reference=reference, evidence=evidence, settle_ms=settle_ms
            )
        )

    async def recover(self, card_id: str) -> Transition:
        return await self.alert(await self._ledger.recover(card_id))

    async def reconcile(
        self, card_id: str, *, result: str, reference: str, evidence: Mapping[str, Any], next_at_ms: int = 0
    ) -> Transition:
        return await self.alert(
            await self._ledger.reconcile(
                card_id, result=result, reference=reference, evidence=evidence, next_at_ms=next_at_ms
            )
        )

    async def sweep_open(self, card_id: str, *, requeue_ms: int) -> Transition:
        return await self.alert(await self._ledger.sweep_open(card_id, requeue_ms=requeue_ms))

    async def dispatch(self, card_id: str, *, fence: int) -> Transition:
        return await self.alert(await self._ledger.dispatch(card_id, fence=fence))

    async def release(self, card_id: str, *, fence: int, reason: str, requeue_ms: int) -> Transition:
        return await self.alert(await self._ledger.release(card_id, fence=fence, reason=reason, requeue_ms=requeue_ms))

    # -- a person's transitions, and everything else: the ledger's own, as they are ---------------

    def __getattr__(self, name: str) -> Any:
        # Only for what the class does not define, so only the names of `DELEGATED`: a method added to the
        # `Ledger` is a choice (announce it or not) that tests/notifications/test_delivery.py asks for.
        if name in DELEGATED:
            return getattr(self._ledger, name)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
