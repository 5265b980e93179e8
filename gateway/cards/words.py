"""What happened to a card, said plainly: once for the requesting agent, once for people.

Two audiences, two rules (ARCHITECTURE invariant 8):

* `said_to_agent` is built from the card's state, the stable code of its outcome and words the
  gateway itself wrote (a tool's declared `refusal_words`, picked by the backend's refusal code, or
  the reason a preview wrote from numbers). Nothing the backend wrote reaches it as text.
* `said_to_people` adds what the backend answered (its status and refusal code): third-party text,
  for the admin API, the console and the CLI only.

`deadline_ms` is the deadline still running on a card, and there is none on a terminal card.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.cards.card import TERMINAL, Card, CardState
from gateway.codes import Code

__all__ = ["deadline_ms", "failure_code", "said_to_agent", "said_to_people"]

_PLAIN: Mapping[CardState, str] = {
    CardState.PENDING: "waiting for approval",
    CardState.APPROVED: "approved: waiting to run",
    CardState.EXECUTING: "approved: running",
    CardState.SUCCEEDED: "succeeded",
    CardState.REJECTED: "rejected by an approver",
    CardState.CANCELLED: "cancelled: not run",
    CardState.EXPIRED: "expired: not run",
    CardState.UNKNOWN: "outcome unknown: checking with the backend",
    CardState.NEEDS_RECONCILIATION: "outcome unknown: a person is checking with the backend",
}

_FAILED: Mapping[str, str] = {
    Code.PRECONDITION_CHANGED.value: "what the approver decided on changed before it ran; nothing was sent",
    Code.CONFLICT.value: "the backend refused it",
    Code.RECEIPT_REFUSED.value: "the backend did not accept the approval's signed receipt; nothing was written",
    Code.REQUESTER_REVOKED.value: "whoever proposed it was revoked before it ran; nothing was sent",
    Code.PERMISSION_DENIED.value: "it was no longer allowed when it was due to run; nothing was sent",
    Code.VALIDATION_ERROR.value: "its arguments could not be sent; nothing was sent",
    Code.NOT_FOUND.value: "the backend did not find its target",
}


def failure_code(card: Card) -> str | None:
    """The stable code of a FAILED card's outcome (None for any other state)."""
    if card.state is not CardState.FAILED:
        return None
    evidence = card.evidence
    code = evidence.get("code")
    if isinstance(code, str) and code in Code.__members__:
        return code
    status = evidence.get("status")
    if status == "refused":  # settled by a status query: the backend says it refused the write
        return Code.CONFLICT.value
    if status in (404, 410):
        return Code.NOT_FOUND.value
    return Code.CONFLICT.value if isinstance(status, int) and status < 500 else Code.UPSTREAM_ERROR.value


def said_to_agent(card: Card) -> str:
    """One plain sentence about the card, safe for the model (no backend text)."""
    if card.state is CardState.PENDING:
        return f"waiting for approval ({len(card.approvers)} of {card.approvals_required})"
    if card.state is not CardState.FAILED:
        return _PLAIN[card.state]
    code = failure_code(card) or Code.UPSTREAM_ERROR.value
    said = card.evidence.get("said")
    if code == Code.PRECONDITION_CHANGED.value:
        return f"failed: {_FAILED[code]}"
    if isinstance(said, str) and said:
        return f"failed: {said}"
    return f"failed: {_FAILED.get(code, 'the backend answered with an error')}"


def said_to_people(card: Card) -> str:
    """`said_to_agent`, plus what the backend answered, for approvers. May hold backend text."""
    said = said_to_agent(card)
    if card.state is not CardState.FAILED:
        return said
    evidence: Mapping[str, Any] = card.evidence
    if evidence.get("sent") is False and evidence.get("reason"):
        return f"{said}: {evidence['reason']}"  # the gateway's own words: nothing reached the backend
    status = evidence.get("status")
    detail = [f"HTTP {status}" if isinstance(status, int) else f"status query: {status}"] if status is not None else []
    if evidence.get("reason"):
        detail.append(f"backend reason: {evidence['reason']}")
    if evidence.get("error"):
        detail.append(str(evidence["error"]))
    return f"{said} ({'; '.join(detail)})" if detail else said


def deadline_ms(card: Card) -> int | None:
    """The deadline still running: decide by while PENDING, execute by once approved, none when terminal."""
    if card.state in TERMINAL:
        return None
    return card.execute_by_ms if card.state is not CardState.PENDING else card.decide_by_ms
