"""Events audited in aggregate: what a count of alike events holds, and the loop that writes the counts.

Who uses it: the two places that write one audit event for many alike ones, so that a flood of them does
not hold the trail (every append is a Redis round trip on a sequential chain): the task-poll audit
(`gateway.executor.poll_audit`) and the edge's flood audit (`gateway.mcp.flood_audit`). Each keeps its own
groups and decides what an aggregate event says; this module holds what they share:

* `Tally`: how many events a group stands for, and when the first and last of them were answered;
* `FlushLoop`: a background task that calls its owner's flush every period while anything is pending,
  started on demand, stopped by the owner's ``aclose`` (which then writes what is left). Cancelled without
  that (the event loop torn down), it has its owner log what was never written, so nothing counted is
  silently dropped.

It knows nothing of events or sinks: the owner writes, and says what to log.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["FlushLoop", "Tally"]


@dataclass(slots=True)
class Tally:
    """A count of alike events, with when the first and the last of them were answered (epoch ms)."""

    count: int = 0
    first_ms: int = 0
    last_ms: int = 0

    def add(self, now_ms: int) -> None:
        """Count one more event, answered at `now_ms`."""
        self.count += 1
        self.first_ms = self.first_ms or now_ms
        self.last_ms = now_ms

    def extra(self, counted: str) -> dict[str, str]:
        """The aggregate event's ``extra`` for the count: `counted` (its name), ``first_ms`` and ``last_ms``."""
        return {counted: str(self.count), "first_ms": str(self.first_ms), "last_ms": str(self.last_ms)}


class FlushLoop:
    """Calls `flush` every `period` seconds while `pending()` holds; `unwritten` logs what is pending when the
    loop is cancelled other than by `stop` (module docstring)."""

    def __init__(
        self,
        *,
        name: str,
        period: float,
        pending: Callable[[], bool],
        flush: Callable[[], Awaitable[object]],
        unwritten: Callable[[], None],
    ) -> None:
        self._name = name
        self._period = period
        self._pending = pending
        self._flush = flush
        self._unwritten = unwritten
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        """Run the loop on the running event loop, unless it runs already (call it whenever a count is added)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _run(self) -> None:
        try:
            while self._pending():
                await asyncio.sleep(self._period)
                await self._flush()
        except asyncio.CancelledError:
            if not self._stopping:  # `stop` was not called, so nobody writes what is pending
                self._unwritten()
            raise

    async def stop(self) -> None:
        """Stop the loop; the owner writes what is pending next (the app's shutdown)."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
