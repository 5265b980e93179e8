"""The audit of a flood refused at the MCP edge: counted refusals, written as one event per second.

Who calls it: `gateway.mcp.budget_front.BudgetFront`, once for each ``tools/call`` it answers
RATE_LIMITED from the limiter's memory. Auditing each of them as its own entry would put the flood
back on Redis: every audit append is a round trip, one at a time per process (the chain is
sequential), so a key refused a thousand times a second would hold the trail, and with it every
other caller's audited call, behind its refusals. Instead:

* the refusals answered at the edge are counted per principal (key, subject, org, acting client),
  tool and code, and written at most `interval_seconds` later as one ``tool.call`` deny event per
  such group, whose ``extra`` says how many (``refusals``), when the first and last were answered
  (``first_ms``, ``last_ms``, epoch milliseconds) and where (``answered``: ``edge``);
* every call the executor answers, the one that spent the last of the budget and any refusal
  Redis itself gave (the first one another gateway process learns of), is audited one by one as
  always.

So every refusal is in the trail, in aggregate, within a second; the README states this. Events
that cannot be written go to the process log, as every audit event does. What is pending when the
process stops is written by `aclose` (the app's shutdown), or to the log if the loop is cancelled
without it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.audit.aggregate import FlushLoop, Tally
from gateway.audit.events import AuditEvent, AuditSink
from gateway.decision import Decision
from gateway.principal import Principal

__all__ = ["EDGE", "FloodAudit"]

logger = logging.getLogger(__name__)

EDGE = "edge"
"""The ``answered`` extra of an aggregated event."""


@dataclass(slots=True)
class _Count:
    reason: str
    refusals: Tally = field(default_factory=Tally)


_Group = tuple[Principal, str, str]


class FloodAudit:
    """Counts edge refusals and writes them, aggregated, to `audit` every `interval_seconds` while any are pending."""

    def __init__(
        self,
        audit: AuditSink,
        *,
        interval_seconds: float = 1.0,
        capacity: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._audit = audit
        self._capacity = capacity
        self._clock = clock
        self._pending: dict[_Group, _Count] = {}
        self._loop = FlushLoop(
            name="countersign-flood-audit",
            period=interval_seconds,
            pending=lambda: bool(self._pending),
            flush=self.flush,
            unwritten=self._log_unwritten,
        )
        self._flushes: set[asyncio.Task[int]] = set()

    def note(self, principal: Principal, tool: str, decision: Decision) -> None:
        """Count one refusal of `tool` for `principal`; it is written by the next flush."""
        now_ms = int(self._clock() * 1000)
        code = decision.code.value if decision.code is not None else ""
        group = (principal, tool, code)
        count = self._pending.setdefault(group, _Count(decision.reason))
        count.refusals.add(now_ms)
        count.reason = decision.reason
        if not self._loop.running:
            self._loop.start()
        elif len(self._pending) >= self._capacity:  # many principals flooding at once: write now, stay bounded
            flush = asyncio.get_running_loop().create_task(self.flush())
            self._flushes.add(flush)  # the loop keeps only a weak reference to a task
            flush.add_done_callback(self._flushes.discard)

    async def flush(self) -> int:
        """Write one event per pending group; returns how many refusals those events account for."""
        pending, self._pending = self._pending, {}
        for (principal, tool, code), count in pending.items():
            extra = {**count.refusals.extra("refusals"), "answered": EDGE}
            if principal.acting_client:
                extra["acting_client"] = principal.acting_client
            reason = f"{count.refusals.count} call(s) refused at the edge; last: {count.reason}"
            event = AuditEvent.by(
                principal,
                action="tool.call",
                outcome="deny",
                tool=tool,
                code=code,
                reason=reason,
                extra=extra,
            )
            await self._audit.record(event)
        return sum(count.refusals.count for count in pending.values())

    def _log_unwritten(self) -> None:
        for (principal, tool, code), count in self._pending.items():
            logger.warning(
                "edge refusals not written to the audit trail at shutdown: %d of %s by key %s (%s)",
                count.refusals.count,
                tool,
                principal.key_id,
                code,
            )

    async def aclose(self) -> None:
        """Write what is pending and stop the loop (the app's shutdown)."""
        await self._loop.stop()
        await self.flush()
