"""A write proposal followed as an MCP task: what its card's state means as a task.

A task is its card, seen by the card's requester: the task id is the card id, so nothing is stored
for a task beside the card, and a task lives exactly as long and as durably as its card (another
gateway process on the same Redis, or this one after a restart, reads the same task).

```text
card state                              task status   what the requester reads
PENDING, APPROVED                       working       waiting for a person; waiting to run
EXECUTING, UNKNOWN, NEEDS_RECONCILIATION working      running; checking an unknown outcome
SUCCEEDED                               completed     the card receipt, with the write's reference
REJECTED, EXPIRED, FAILED               completed     isError, with a stable code (nothing written)
CANCELLED                               cancelled     -
```

A rejected, expired or failed write is a tool call that answered with an error, not a protocol
failure, so it is ``completed`` with an ``isError`` result: the 2026-07-28 tasks extension reserves
``failed`` for JSON-RPC errors. (The 2025-11-25 experimental tasks say the opposite, that an
``isError`` tool result is ``failed``; that era's wire applies it, in `gateway.mcp.tasks`.)

Pure data and functions: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.cards.card import Card, CardState
from gateway.cards.views import card_for_agent
from gateway.codes import Code
from gateway.envelope import Envelope

__all__ = ["RESULT_RETENTION_MS", "TaskState", "task_of"]

TaskStatus = Literal["working", "completed", "cancelled"]

RESULT_RETENTION_MS = 24 * 3600 * 1000
"""How long past the end of its card's windows a task is promised to stay readable. The card itself
is kept longer (the ledger deletes no card), so this is a lower bound the client may rely on."""

_WAITING_MS, _RUNNING_MS = 5000, 2000
"""Suggested poll intervals: a person decides in seconds or hours; a running write in seconds."""

_WORKING: dict[CardState, str] = {
    CardState.APPROVED: "Approved; waiting to run.",
    CardState.EXECUTING: "The approved write is running.",
    CardState.UNKNOWN: "The write's outcome is unknown; the gateway is checking it with the backend.",
    CardState.NEEDS_RECONCILIATION: "The write's outcome is unknown; an administrator must confirm it.",
}

_REFUSED: dict[CardState, Code] = {
    CardState.REJECTED: Code.REJECTED,
    CardState.EXPIRED: Code.EXPIRED,
    CardState.FAILED: Code.WRITE_FAILED,
}


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskState:
    """One card as a task, at one moment."""

    task_id: str
    status: TaskStatus
    message: str
    created_ms: int
    updated_ms: int
    ttl_ms: int
    """From creation: covers the card's decide-by and execute-by windows, plus `RESULT_RETENTION_MS`."""
    poll_interval_ms: int
    result: Envelope | None
    """The tool call's answer once ``completed`` (an error envelope for a write that did not happen);
    also set when ``cancelled``, for the 2025-11-25 ``tasks/result``. None while ``working``."""

    @property
    def terminal(self) -> bool:
        return self.status != "working"


def task_of(card: Card, *, updated_ms: int) -> TaskState:
    """The task `card` is, last changed at `updated_ms` (its latest history event, by the Redis clock)."""
    status: TaskStatus = "working"
    result: Envelope | None = None
    view = card_for_agent(card)
    if card.state is CardState.PENDING:
        message = f"Waiting for an administrator's approval ({len(card.approvers)} of {card.approvals_required})."
    elif card.state in _WORKING:
        message = _WORKING[card.state]
    elif card.state is CardState.SUCCEEDED:
        status, message = "completed", "The approved write succeeded."
        result = Envelope.ok(view)
    elif card.state is CardState.CANCELLED:
        status, message = "cancelled", "Withdrawn before it ran; nothing was written."
        result = Envelope.refused(Code.CANCELLED, details={"card": view})
    else:
        code = _REFUSED[card.state]
        status, message = "completed", Envelope.refused(code).for_model()["error"]["message"]
        result = Envelope.refused(code, details={"card": view})
    # execute_by is set when the card is approved; before that, the latest it can be.
    window_end = card.execute_by_ms if card.execute_by_ms is not None else card.decide_by_ms + card.execute_within_ms
    waiting = card.state in (CardState.PENDING, CardState.APPROVED)
    return TaskState(
        task_id=card.card_id,
        status=status,
        message=message,
        created_ms=card.created_ms,
        updated_ms=max(updated_ms, card.created_ms),
        ttl_ms=max(window_end - card.created_ms, 0) + RESULT_RETENTION_MS,
        poll_interval_ms=_WAITING_MS if waiting else _RUNNING_MS,
        result=result,
    )
