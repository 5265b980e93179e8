"""Task polls audited one event per task and window, written to the real audit stream (real Redis)."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from gateway.audit.events import AuditEvent
from gateway.executor.poll_audit import PollAudit
from gateway.store.audit_stream import RedisStreamAuditSink
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _poll(task_id: str = "crd_1_" + "a" * 32, *, outcome: str = "ok", code: str = "") -> AuditEvent:
    return AuditEvent(action="task.get", outcome=outcome, subject="alice@acme.example", org="acme",
                      key_id="key_0123456789ab", code=code, extra={"task_id": task_id})  # fmt: skip


async def test_three_hundred_polls_of_one_task_in_a_window_are_two_entries(redis: Redis) -> None:
    """The first poll is written at once; the other 299 of the window are one event saying how many, when the
    window ends; a poll after it starts the next window with an entry of its own."""
    sink, clock = RedisStreamAuditSink(redis, secret=TEST_AUDIT_SECRET.encode()), Clock()
    polls = PollAudit(sink, window_seconds=60, clock=clock)
    for _ in range(300):
        assert await polls.poll(_poll(), status="working")
        clock.now += 0.1  # a client polling ten times a second: 30 s of polls
    assert len(await sink.recent(1000)) == 1
    clock.now += 31
    assert await polls.flush() == 299
    first, counted = await sink.recent(1000)
    assert (first.extra["status"], "polls" not in first.extra) == ("working", True)
    assert (counted.extra["polls"], counted.extra["window_s"], counted.extra["status"]) == ("299", "60", "working")
    assert abs(int(counted.extra["last_ms"]) - int(counted.extra["first_ms"]) - 29_800) <= 1
    assert await polls.poll(_poll(), status="working")
    assert len(await sink.recent(1000)) == 3
    await polls.aclose()


async def test_a_change_of_status_or_a_refusal_is_written_at_once(redis: Redis) -> None:
    """Another status, another task or a refusal is another group: each one's first poll is in the trail at once,
    and shutdown writes what every window counted."""
    sink, clock = RedisStreamAuditSink(redis, secret=TEST_AUDIT_SECRET.encode()), Clock()
    polls = PollAudit(sink, window_seconds=60, clock=clock)
    await polls.poll(_poll(), status="working")
    await polls.poll(_poll(), status="working")
    await polls.poll(_poll(), status="completed")
    await polls.poll(_poll("crd_1_" + "b" * 32), status="working")
    await polls.poll(_poll(outcome="deny", code="RATE_LIMITED"), status="")
    written = await sink.recent(100)
    assert [(e.extra["task_id"][-1], e.extra["status"], e.code) for e in written] == [
        ("a", "working", ""), ("a", "completed", ""), ("b", "working", ""), ("a", "", "RATE_LIMITED")
    ]  # fmt: skip
    await polls.aclose()
    [aggregate] = (await sink.recent(100))[4:]
    assert (aggregate.extra["polls"], aggregate.extra["status"]) == ("1", "working")
