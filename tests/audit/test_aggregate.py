"""The loop that writes aggregated audit events: it flushes while anything is pending, and what it could not
write is logged, never dropped in silence."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from gateway.audit.aggregate import FlushLoop, Tally

pytestmark = pytest.mark.anyio


class Owner:
    """Counts pending events and records what the loop asked of it."""

    def __init__(self, period: float) -> None:
        self.pending = 0
        self.flushed = 0
        self.logged: list[int] = []
        self.loop = FlushLoop(name="test-flush", period=period, pending=lambda: self.pending > 0,
                              flush=self.flush, unwritten=lambda: self.logged.append(self.pending))  # fmt: skip

    async def flush(self) -> None:
        self.flushed, self.pending = self.flushed + self.pending, 0


def test_a_tally_counts_and_remembers_the_first_and_last_answer() -> None:
    """The first time stays the first; the last moves with every event."""
    tally = Tally()
    for now_ms in (1_000, 1_500, 2_250):
        tally.add(now_ms)
    assert tally.extra("polls") == {"polls": "3", "first_ms": "1000", "last_ms": "2250"}


async def test_the_loop_flushes_what_is_pending_and_ends_when_nothing_is() -> None:
    """Started on demand, it writes within a period and then stops by itself."""
    owner = Owner(period=0.01)
    owner.pending = 2
    owner.loop.start()
    with anyio.fail_after(5):
        while owner.loop.running:
            await anyio.sleep(0.01)
    assert (owner.flushed, owner.pending, owner.logged) == (2, 0, [])


async def test_a_loop_cancelled_without_stop_has_its_owner_log_what_is_pending() -> None:
    """Torn down without the app's shutdown, the pending count is logged; stopped by `stop`, nothing is, since
    the owner writes it next."""
    torn = Owner(period=3600)
    torn.pending = 3
    torn.loop.start()
    await asyncio.sleep(0)
    task = next(t for t in asyncio.all_tasks() if t.get_name() == "test-flush")
    task.cancel()
    with anyio.fail_after(5):
        while torn.loop.running:
            await anyio.sleep(0.01)
    assert torn.logged == [3]
    stopped = Owner(period=3600)
    stopped.pending = 3
    stopped.loop.start()
    await stopped.loop.stop()
    assert stopped.logged == [] and not stopped.loop.running
