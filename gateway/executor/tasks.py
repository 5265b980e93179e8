"""A principal's write proposals followed as MCP tasks: read, list, cancel (`TaskPath`).

Who calls it: the MCP surface, for ``tasks/*`` requests and to answer a task-capable client's
proposal with its task. A task is its card (`gateway.cards.task_states`); the card is reached only
through `LedgerCallerCards`, the same piece the approvals tools use, so a task of another
principal answers exactly like one that does not exist (NOT_FOUND).

Every request spends one call from the caller's read budget, the one its read tools spend from
(`policies.charges`): following a task is reading the ledger, and a client that polls past its budget is
refused RATE_LIMITED (`Throttled`, with the wait) like any other read, before the ledger is read.

Every request is audited (``task.get``, ``task.result``, ``task.list``, ``task.cancel``), like an approvals
tool call, polls in aggregate: the first poll of a task (per caller, outcome and status) is written at
once and the rest of its window as one event (`gateway.executor.poll_audit`); a cancellation, which
changes the card, one by one. A refusal is a value, never an exception. An answer that could not be
audited is withheld (LEDGER_UNAVAILABLE), as the agent path does for reads. It knows no protocol era and
no wire shape.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import anyio

from gateway.audit.events import AuditEvent, AuditSink
from gateway.cards.card import Card
from gateway.cards.contract import Ledger, TransitionStatus
from gateway.cards.task_states import TaskState, task_of
from gateway.codes import Code
from gateway.errors import StoreUnavailableError
from gateway.executor.agent import with_acting_client
from gateway.executor.caller_cards import LedgerCallerCards
from gateway.executor.poll_audit import PollAudit
from gateway.limits.budgets import Limits
from gateway.limits.rate_limiter import Charge, RateLimiter
from gateway.principal import Principal
from gateway.printable import escape_unprintable
from policies.charges import budget_owner

__all__ = ["TaskPath", "Throttled"]

logger = logging.getLogger(__name__)

_POLLS = frozenset({"task.get", "task.result", "task.list"})
"""The requests that follow a task without changing it, audited in aggregate (`PollAudit`)."""
MAX_LISTED = 100
"""The most tasks one ``tasks/list`` answers: the caller's newest cards."""


@dataclass(frozen=True, slots=True)
class Throttled:
    """RATE_LIMITED: the caller's read budget is spent; the same request passes after `retry_after` seconds."""

    retry_after: float


class TaskPath:
    """The caller's own cards as tasks."""

    def __init__(
        self,
        *,
        ledger: Ledger,
        audit: AuditSink,
        limiter: RateLimiter,
        limits: Limits,
        polls: PollAudit | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._ledger = ledger
        self._audit = audit
        self._limiter = limiter
        self._limits = limits
        self._polls = polls if polls is not None else PollAudit(audit)
        self._clock = clock

    async def aclose(self) -> None:
        """Write the pending aggregates of task polls (the app's shutdown)."""
        await self._polls.aclose()

    async def opened(self, principal: Principal, card_id: str) -> TaskState | Code:
        """The task a proposal just filed, to answer the proposal with. Not audited: the proposal was."""
        try:
            card = await LedgerCallerCards(self._ledger, principal).card(card_id)
            return Code.NOT_FOUND if card is None else await self._state(card)
        except StoreUnavailableError:
            return Code.LEDGER_UNAVAILABLE

    async def get(self, principal: Principal, task_id: str) -> TaskState | Code | Throttled:
        """The caller's task `task_id` now (NOT_FOUND: none, or someone else's)."""
        started = self._clock()
        if (throttled := await self._spend("task.get", principal, task_id, started)) is not None:
            return throttled
        try:
            card = await LedgerCallerCards(self._ledger, principal).card(task_id)
            found = Code.NOT_FOUND if card is None else await self._state(card)
        except StoreUnavailableError as error:
            return await self._refused("task.get", principal, task_id, Code.LEDGER_UNAVAILABLE, started, error.cause)
        return await self._answer("task.get", principal, task_id, found, started)

    async def result(self, principal: Principal, task_id: str) -> TaskState | Code | Throttled:
        """The caller's task `task_id` once it is terminal, waiting (polling the ledger) until it is.

        The wait has no bound of its own: the caller's request deadline, or its disconnect, ends it.
        """
        started = self._clock()
        if (throttled := await self._spend("task.result", principal, task_id, started)) is not None:
            return throttled
        cards = LedgerCallerCards(self._ledger, principal)
        try:
            card = await cards.card(task_id)
            state = Code.NOT_FOUND if card is None else await self._state(card)
            while isinstance(state, TaskState) and not state.terminal:
                await anyio.sleep(state.poll_interval_ms / 1000)
                card = await cards.card(task_id)
                state = Code.NOT_FOUND if card is None else await self._state(card)
        except StoreUnavailableError as error:
            return await self._refused("task.result", principal, task_id, Code.LEDGER_UNAVAILABLE, started, error.cause)
        return await self._answer("task.result", principal, task_id, state, started)

    async def list(self, principal: Principal) -> list[TaskState] | Code | Throttled:
        """The caller's newest tasks, newest first (at most `MAX_LISTED`): never anyone else's."""
        started = self._clock()
        if (throttled := await self._spend("task.list", principal, "", started)) is not None:
            return throttled
        try:
            cards = await LedgerCallerCards(self._ledger, principal).cards(MAX_LISTED)
            states = [await self._state(card) for card in cards]
        except StoreUnavailableError as error:
            return await self._refused("task.list", principal, "", Code.LEDGER_UNAVAILABLE, started, error.cause)
        status = ",".join(sorted({state.status for state in states}))
        recorded = await self._record("task.list", principal, "", "ok", started, status=f"{len(states)}:{status}")
        return states if recorded else Code.LEDGER_UNAVAILABLE

    async def cancel(self, principal: Principal, task_id: str) -> tuple[TaskState, bool] | Code | Throttled:
        """Cancel the caller's task `task_id` while its card can still be cancelled (PENDING, APPROVED).

        Returns the task as it is after the attempt, and whether this request cancelled it (False:
        the card was already past cancelling, running or terminal, and is unchanged).
        NOT_FOUND: none, or someone else's. LEDGER_UNAVAILABLE: not confirmed durable, or no ledger.
        """
        started = self._clock()
        if (throttled := await self._spend("task.cancel", principal, task_id, started)) is not None:
            return throttled
        try:
            withdrawn = await LedgerCallerCards(self._ledger, principal).withdraw(task_id)
            if withdrawn is None:
                reason = "no such task for this caller"
                return await self._refused("task.cancel", principal, task_id, Code.NOT_FOUND, started, reason)
            card, transition = withdrawn
            if transition.status is TransitionStatus.ERR_NOT_DURABLE:
                # Maybe applied, not confirmed: not acknowledged as done (ARCHITECTURE invariant 7).
                reason = f"cancellation not confirmed durable ({'; '.join(transition.problems)})"
                return await self._refused("task.cancel", principal, task_id, Code.LEDGER_UNAVAILABLE, started, reason)
            state = await self._state(transition.card or card)
        except StoreUnavailableError as error:
            return await self._refused("task.cancel", principal, task_id, Code.LEDGER_UNAVAILABLE, started, error.cause)
        outcome = {"cancelled": str(transition.ok).lower(), "state": (transition.card or card).state.value}
        answered = await self._answer("task.cancel", principal, task_id, state, started, extra=outcome)
        return answered if isinstance(answered, Code) else (answered, transition.ok)

    async def _state(self, card: Card) -> TaskState:
        events = await self._ledger.events(card.card_id)
        updated = max((event.last_at_ms or event.at_ms for event in events), default=card.created_ms)
        return task_of(card, updated_ms=updated)

    async def _answer(
        self,
        action: str,
        principal: Principal,
        task_id: str,
        found: TaskState | Code,
        started: float,
        *,
        extra: Mapping[str, str] | None = None,
    ) -> TaskState | Code:
        if isinstance(found, Code):
            return await self._refused(action, principal, task_id, found, started, "no such task for this caller")
        if not await self._record(action, principal, task_id, "ok", started, extra=extra, status=found.status):
            return Code.LEDGER_UNAVAILABLE  # the answer is withheld: it was not audited
        return found

    async def _refused(
        self, action: str, principal: Principal, task_id: str, code: Code, started: float, reason: str
    ) -> Code:
        await self._record(action, principal, task_id, "deny", started, code=code.value, reason=reason)
        return code

    async def _record(
        self,
        action: str,
        principal: Principal,
        task_id: str,
        outcome: str,
        started: float,
        *,
        code: str = "",
        reason: str = "",
        extra: Mapping[str, str] | None = None,
        status: str = "",
    ) -> bool:
        """Audit one request; a poll (`_POLLS`) through `PollAudit`, grouped by `status` among the rest."""
        event = AuditEvent.by(
            principal,
            action=action,
            outcome=outcome,
            code=code,
            reason=reason,
            latency_ms=(self._clock() - started) * 1000,
            # The task id is the caller's text: kept printable, and bounded by the event itself.
            extra=with_acting_client(
                principal, {**({"task_id": escape_unprintable(task_id)} if task_id else {}), **(extra or {})}
            ),
        )
        if action in _POLLS:
            return await self._polls.poll(event, status=status)
        return await self._audit.record(event)

    async def _spend(self, action: str, principal: Principal, task_id: str, started: float) -> Throttled | Code | None:
        """Spend one read from the caller's budget; the refusal (audited) when it is spent or cannot be read."""
        charge = Charge(bucket="reads", budget=self._limits.budget("reads", principal.org))
        try:
            verdict = await self._limiter.spend(budget_owner(principal), (charge,))
        except StoreUnavailableError as error:
            return await self._refused(action, principal, task_id, Code.LEDGER_UNAVAILABLE, started, error.cause)
        if verdict.allowed:
            return None
        reason = f"{verdict.bucket} budget spent; retry after {verdict.retry_after:g} s"
        await self._refused(action, principal, task_id, Code.RATE_LIMITED, started, reason)
        return Throttled(retry_after=verdict.retry_after)
