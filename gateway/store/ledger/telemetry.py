"""What the ledger's one script runner reports: a span and a count per transition, and card latencies.

Who uses it: `gateway.store.ledger.redis_ledger.RedisLedger._eval`, the single point every card transition
passes through, is decorated with `observed`. It adds nothing to the script's work and changes no
answer: a span ``ledger <transition>`` (``countersign.card.id``, ``countersign.ledger.status``) around
the script, the card id on the span that called it (the MCP, admin or worker span of the request),
a `gateway.telemetry.metrics.count_transition` count, and, for the answers that end a wait, its latency:
created -> decided when a card is approved, rejected, cancelled or expired undecided, and
approved -> outcome when a write's outcome (SUCCEEDED, FAILED, UNKNOWN) is recorded. Times are the
card's own (the Redis clock) against this host's clock at the answer.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gateway.cards.card import Card, CardState
from gateway.cards.contract import Transition, TransitionStatus
from gateway.telemetry.metrics import count_approval_decided, count_execution_finished, count_transition
from gateway.telemetry.tracing import annotate, span

__all__ = ["observed"]

Self = TypeVar("Self")
Run = Callable[[Self, str, list[str], list[str | int]], Awaitable[Transition]]

_DECIDED = {
    ("approve", CardState.APPROVED): "approved",
    ("reject", CardState.REJECTED): "rejected",
    ("cancel", CardState.CANCELLED): "cancelled",
    ("sweep_open", CardState.EXPIRED): "expired",
}
_OUTCOMES = frozenset({CardState.SUCCEEDED, CardState.FAILED, CardState.UNKNOWN})
_ATTRIBUTES = {"db.system.name": "redis", "db.operation.name": "EVALSHA"}


def observed(run: Run[Self]) -> Run[Self]:
    """Decorate the ledger's script runner ``(self, name, keys, args) -> Transition`` (keys[0] is the card's key)."""

    @functools.wraps(run)
    async def observe(self: Self, name: str, keys: list[str], args: list[str | int]) -> Transition:
        minted = keys[0].rpartition(":card:")[2] if keys else ""
        with span(f"ledger {name}", attributes=_ATTRIBUTES, card_id=minted) as current:
            result = await run(self, name, keys, args)
            card_id = result.card.card_id if result.card is not None else str(result.extra.get("card_id") or minted)
            current.set_attribute("countersign.ledger.status", result.status.value)
            if card_id != minted:
                current.set_attribute("countersign.card.id", card_id)
        annotate(card_id=card_id)
        count_transition(name, result.status.value)
        if result.status is TransitionStatus.OK and result.card is not None:
            _latency(name, result.card)
        return result

    return observe


def _latency(name: str, card: Card) -> None:
    now_ms = time.time() * 1000
    decision = _DECIDED.get((name, card.state))
    if decision is not None and (decision == "approved" or card.approved_ms is None):
        count_approval_decided(decision, (now_ms - card.created_ms) / 1000)
    elif name == "complete" and card.state in _OUTCOMES and card.approved_ms is not None:
        count_execution_finished(card.state.value, (now_ms - card.approved_ms) / 1000)
    elif card.state is CardState.NEEDS_RECONCILIATION and card.approved_ms is not None:
        # Handed to a person (by the reconciler or the sweep): counted as an outcome, so an alert sees them grow.
        count_execution_finished(card.state.value, (now_ms - card.approved_ms) / 1000)
