"""What an agent may see of a card: a projection with no third-party text, no roles and no one else's identity."""

from __future__ import annotations

from typing import Any

from gateway.canonical import iso_from_ms
from gateway.card import Card, CardState

__all__ = ["card_for_agent"]

PROPOSAL_NOTE = "Approval requested. Nothing happens until an administrator approves; follow it with approvals_status."


def card_for_agent(card: Card, *, existing: bool = False) -> dict[str, Any]:
    """The agent's view of its own card: decision and outcome apart, and what it may do next."""
    view: dict[str, Any] = {
        "card_id": card.card_id,
        "tool": card.tool,
        "summary": card.summary,
        "status": card.state.value,
        "decision": card.decision,
        "outcome": card.outcome,
        "approvals_required": card.approvals_required,
        "approvals_received": len(card.approvers),
        "expires_at": iso_from_ms(card.execute_by_ms if card.state is CardState.APPROVED else card.decide_by_ms),
    }
    if existing:
        view["existing"] = True
        view["note"] = "An identical request is already open; this is that card."
    elif card.state is CardState.PENDING:
        view["note"] = PROPOSAL_NOTE
    if card.rejection:
        # Who rejected it is another person's identity: the admin console shows it, the agent does not.
        view["rejection"] = {"reason": card.rejection.get("reason", "")}
    if card.reference:
        view["reference"] = card.reference
    return view
