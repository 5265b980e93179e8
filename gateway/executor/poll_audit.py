"""The audit of task polls: one event per task and window, not one per poll.

Who calls it: `gateway.executor.tasks.TaskPath`, for every ``task.get``, ``task.result`` and ``task.list``
it answers or refuses. A client follows a task by polling it (the 2025-11-25 SDK every half second, for
as long as a day), so one entry per poll would make the trail mostly polls, and each entry a Redis round
trip on a sequential chain. Instead a poll is grouped by its caller (key, subject, org, acting client),
action, task, outcome, code and the task's status:

* the first poll of a group is written at once, and its answer waits for it (an answer that could not
  be audited is withheld, as everywhere);
* the group's later polls within `window_seconds` of that one are counted, and written as one event when
  the window ends, whose ``extra`` says how many (``polls``), when the first and last were answered
  (``first_ms``, ``last_ms``, epoch milliseconds) and the window (``window_s``);
* a change of the task's status (or of outcome or code: a refusal) is another group, so it is written at
  once: the trail shows every state a caller saw, when it first saw it.

So every poll is in the trail, each first one exactly, the rest in aggregate within a window. What is
pending when the process stops is written by `aclose` (the app's shutdown), or logged if the loop is
cancelled without it; an aggregate that cannot be written goes to the process log, as every audit event.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.audit.aggregate import FlushLoop, Tally
from gateway.audit.events import AuditEvent, AuditSink

__all__ = ["PollAudit"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Window:
    ends: float
    template: AuditEvent
    polls: Tally = field(default_factory=Tally)


class PollAudit:
    """Writes the first poll of a group at once and the rest of its window as one event (module docstring)."""

    def __init__(
        self,
        audit: AuditSink,
        *,
        window_seconds: float = 60.0,
        capacity: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._audit = audit
        self._window = window_seconds
        self._capacity = capacity
        self._clock = clock
        self._open: dict[tuple[str, ...], _Window] = {}
        self._loop = FlushLoop(
            name="countersign-poll-audit",
            period=window_seconds / 4,
            pending=lambda: bool(self._open),
            flush=self.flush,
            unwritten=self._log_unwritten,
        )

    async def poll(self, event: AuditEvent, *, status: str) -> bool:
        """Audit one poll, `event` (its ``extra`` gets ``status``). True when it is in the trail or counted for
        its window's aggregate; False when, the first of its group, it could not be written."""
        now = self._clock()
        group = (event.key_id, event.subject, event.org, event.action, event.extra.get("task_id", ""),
                 event.outcome, event.code, status, event.extra.get("acting_client", ""))  # fmt: skip
        window = self._open.get(group)
        if window is not None and now < window.ends:
            window.polls.add(int(now * 1000))
            return True
        if window is not None:  # its window ended before the loop wrote it: write it first, in order
            del self._open[group]
            await self._write(window)
        if len(self._open) >= self._capacity:
            await self.flush(everything=True)
        first = dataclasses.replace(event, extra={**event.extra, "status": status})
        self._open[group] = _Window(ends=now + self._window, template=first)
        self._loop.start()
        return await self._audit.record(first)

    async def flush(self, *, everything: bool = False) -> int:
        """Write the aggregate of every window that has ended (`everything`: of every window); how many polls."""
        now = self._clock()
        ended = [group for group, window in self._open.items() if everything or now >= window.ends]
        polls = 0
        for group in ended:
            window = self._open.pop(group)
            polls += window.polls.count
            await self._write(window)
        return polls

    async def _write(self, window: _Window) -> None:
        if not window.polls.count:
            return
        reason = f"{window.polls.count} more poll(s) of this task in the window, answered alike"
        extra = {**window.template.extra, **window.polls.extra("polls"), "window_s": f"{self._window:g}"}
        await self._audit.record(dataclasses.replace(window.template, reason=reason, latency_ms=None, extra=extra))

    def _log_unwritten(self) -> None:
        counted = sum(window.polls.count for window in self._open.values())
        if counted:
            logger.warning("task polls not written to the audit trail at shutdown: %d", counted)

    async def aclose(self) -> None:
        """Write every pending aggregate and stop the loop (the app's shutdown)."""
        await self._loop.stop()
        await self.flush(everything=True)
