"""The edge's flood audit: refusals counted per principal, tool and code, written as one event each."""

from __future__ import annotations

import anyio
import pytest
from redis.asyncio import Redis

from gateway.audit.events import ListAuditSink
from gateway.codes import Code
from gateway.decision import Decision
from gateway.mcp.flood_audit import EDGE, FloodAudit
from gateway.principal import Principal
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.telemetry.metrics import REGISTRY

pytestmark = pytest.mark.anyio

ALICE = Principal(subject="alice@acme.example", org="acme", roles=frozenset({"staff"}), key_id="key_alice")
BOB = Principal(subject="bob@acme.example", org="acme", roles=frozenset({"staff"}), key_id="key_bob",
                acting_client="planner")  # fmt: skip
SPENT = Decision.deny(Code.RATE_LIMITED, "reads budget spent; retry after 2 s")


class Clock:
    def __init__(self) -> None:
        self.now = 1_764_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_refusals_are_written_as_one_event_per_principal_and_tool_with_their_count() -> None:
    """Three refusals of Alice's and one of Bob's become two deny events that say how many, when, and
    where they were answered; Bob's names the client acting for him."""
    sink, clock = ListAuditSink(), Clock()
    flood = FloodAudit(sink, interval_seconds=3600, clock=clock)
    for _ in range(3):
        flood.note(ALICE, "rooms_list", SPENT)
        clock.now += 0.25
    flood.note(BOB, "rooms_list", SPENT)
    assert sink.events == []  # nothing is written per refusal
    assert await flood.flush() == 4
    alice, bob = sink.events
    assert (alice.action, alice.outcome, alice.code, alice.key_id, alice.tool) == (
        "tool.call", "deny", "RATE_LIMITED", "key_alice", "rooms_list",
    )  # fmt: skip
    assert alice.extra == {"refusals": "3", "first_ms": "1764000000000", "last_ms": "1764000000500", "answered": EDGE}
    assert bob.extra["refusals"] == "1" and bob.extra["acting_client"] == "planner"
    assert await flood.flush() == 0 and len(sink.events) == 2
    await flood.aclose()


async def test_pending_refusals_are_written_within_the_interval_and_at_shutdown() -> None:
    """The loop writes what is pending after one interval; `aclose` writes the rest."""
    sink = ListAuditSink()
    flood = FloodAudit(sink, interval_seconds=0.01)
    flood.note(ALICE, "rooms_list", SPENT)
    with anyio.fail_after(5):
        while not sink.events:
            await anyio.sleep(0.01)
    closing = FloodAudit(sink, interval_seconds=3600)
    closing.note(BOB, "rooms_list", SPENT)
    await closing.aclose()
    assert [e.key_id for e in sink.events] == ["key_alice", "key_bob"]
    await flood.aclose()


async def test_an_aggregated_event_counts_each_refusal_it_stands_for_in_the_metrics(redis: Redis) -> None:
    """The audit sink counts refusals by code; an aggregated event of five counts five."""

    def rate_limited() -> float:
        return REGISTRY.get_sample_value("countersign_rate_limit_refusals_total", {"code": "RATE_LIMITED"}) or 0.0

    flood = FloodAudit(RedisStreamAuditSink(redis, secret=b"s" * 32), interval_seconds=3600)
    before = rate_limited()
    for _ in range(5):
        flood.note(ALICE, "rooms_list", SPENT)
    await flood.aclose()
    assert rate_limited() == before + 5


async def test_past_its_capacity_of_groups_the_pending_refusals_are_written_at_once() -> None:
    """A flood from more principals than `capacity` does not wait for the interval: memory stays bounded."""
    sink = ListAuditSink()
    flood = FloodAudit(sink, interval_seconds=3600, capacity=3)
    for n in range(4):
        flood.note(Principal(subject=f"p{n}@acme.example", org="acme", roles=frozenset()), "rooms_list", SPENT)
    with anyio.fail_after(5):
        while len(sink.events) < 4:
            await anyio.sleep(0.01)
    await flood.aclose()
    assert sorted(e.subject for e in sink.events) == [f"p{n}@acme.example" for n in range(4)]
