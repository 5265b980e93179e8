"""Audit appends made while one is in flight go together: one script call per batch, each entry its own link.

Every test checks the chain the batches leave (`AuditTrail.verify`), and which events landed against
what each caller was told.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from gateway.archives.audit_archive import AuditArchive
from gateway.audit.events import AuditEvent
from gateway.provenance import CallRecord, HistoryRules, history_owner
from gateway.store import audit_stream as store_audit
from gateway.store.audit_stream import Along, RedisStreamAuditSink, audit_keys
from gateway.store.audit_trail import AuditTrail
from gateway.store.call_history import RedisCallHistory, history_key
from tests.support.examples import examples
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio

SECRET = TEST_AUDIT_SECRET.encode()
RULES = HistoryRules(window_seconds=30, max_reads=50)
_streams = itertools.count()


@pytest.fixture
def redis(own_redis: Redis) -> Redis:
    """A server of this module's own (conftest's `own_redis`): the round-trip counts read its command statistics."""
    return own_redis


def _event(tool: str) -> AuditEvent:
    return AuditEvent(action="tool.call", outcome="ok", subject="alice@acme.example", org="acme", tool=tool)


async def _script_calls(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def _verified(redis: Redis, stream: str, tmp_path: Path) -> list[str]:
    """The tools of the stream's entries, oldest first, after checking the whole chain."""
    sink = RedisStreamAuditSink(redis, secret=SECRET, stream=stream)
    verdict = await AuditTrail(sink, AuditArchive(tmp_path / stream)).verify(SECRET)
    assert verdict.broken is None, verdict.broken
    return [event.tool for event in await sink.recent(10_000)]


async def test_appends_made_while_one_is_in_flight_go_in_one_script_call(redis: Redis, tmp_path: Path) -> None:
    sink = RedisStreamAuditSink(redis, secret=SECRET, stream="batched")
    assert await sink.record(_event("warm-up"))  # loads the script; the answer tells the server's clock
    before = await _script_calls(redis)
    answers = await asyncio.gather(*(sink.record(_event(f"t{i}")) for i in range(20)))
    assert all(answers)
    # The first goes alone (nothing waited yet when it was sent), the 19 that waited behind it together.
    assert await _script_calls(redis) - before == 2
    assert sorted(await _verified(redis, "batched", tmp_path)) == sorted(["warm-up", *(f"t{i}" for i in range(20))])


async def test_a_batch_is_timed_by_the_server_clock(redis: Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids are the server's milliseconds (learnt from each answer), not this process's clock: one an hour
    ahead of the server still names ids within a minute of the server's time."""
    ahead = store_audit._now_us
    monkeypatch.setattr(store_audit, "_now_us", lambda: ahead() + 3_600_000_000)
    sink = RedisStreamAuditSink(redis, secret=SECRET, stream="timed")
    assert await sink.record(_event("first"))
    await asyncio.gather(*(sink.record(_event(f"t{i}")) for i in range(5)))
    seconds, micros = await redis.time()
    server_ms = seconds * 1000 + micros // 1000
    for entry_id, _fields in await sink.entries("", 100):
        assert abs(int(entry_id.partition("-")[0]) - server_ms) < 60_000


_SLOW = Along(lua="local n = 0 for i = 1, tonumber(A[1]) do n = n + i end", keys=(), args=(20_000_000,))
"""A write that keeps the script busy for tens of ms after it read the server's clock: a slow answer."""


async def test_an_id_is_never_behind_the_server_clock_after_a_slow_answer(redis: Redis) -> None:
    """The offset is measured from when the call was sent, so an answer that arrives long after the server
    read its clock does not set the ids back: each id is at or after the server time read before it."""
    sink = RedisStreamAuditSink(redis, secret=SECRET, stream=f"slow{next(_streams)}")
    assert await sink.record(_event("slow"), along=_SLOW)
    for number in range(3):
        seconds, micros = await redis.time()
        before_ms = seconds * 1000 + micros // 1000
        assert await sink.record(_event(f"t{number}"))
        [entry] = await sink.recent(1)
        assert int(entry.id.partition("-")[0]) >= before_ms
        assert await sink.record(_event("slow"), along=_SLOW)


async def test_an_entry_whose_own_write_fails_is_left_out_and_the_rest_of_its_batch_lands(
    redis: Redis, tmp_path: Path
) -> None:
    sink = RedisStreamAuditSink(redis, secret=SECRET, stream="refused")
    history = RedisCallHistory(redis, audit=sink)
    assert await sink.record(_event("warm-up"))
    broken = history_owner("acme", "broken@acme.example")
    await redis.set(history_key(broken), "not a list")  # its LPUSH answers WRONGTYPE
    owners = [history_owner("acme", f"u{i}@acme.example") for i in range(6)]
    owners.insert(3, broken)

    async def read(owner: str, tool: str) -> bool:
        record = CallRecord(tool=tool, at_ms=1_000, untrusted_text=False, private=False)
        return await history.append_audited(owner, record, rules=RULES, event=_event(tool))

    answers = await asyncio.gather(*(read(owner, f"r{i}") for i, owner in enumerate(owners)))
    assert answers == [owner != broken for owner in owners]
    landed = await _verified(redis, "refused", tmp_path)
    assert sorted(landed) == sorted(["warm-up", *(f"r{i}" for i, owner in enumerate(owners) if owner != broken)])
    for i, owner in enumerate(owners):
        if owner != broken:
            assert [r.tool for r in await history.recent(owner, rules=RULES)] == [f"r{i}"]


async def test_an_entry_that_must_take_a_server_id_ends_its_batch_and_the_rest_chain_on_it(
    redis: Redis, tmp_path: Path
) -> None:
    """A stream holding a later id than the batch's (written by something else, with a sequence part larger
    than any of the batch's) makes an entry take ``*``; the entries after it were MACed on an id it does
    not have, so they are MACed again on its own."""
    sink = RedisStreamAuditSink(redis, secret=SECRET, stream="later")
    assert await sink.record(_event("warm-up"))
    seconds, _micros = await redis.time()
    foreign = await redis.xadd("later", {"x": "1"}, id=f"{(seconds + 3600) * 1000}-1000000")
    answers = await asyncio.gather(*(sink.record(_event(f"t{i}")) for i in range(8)))
    assert all(answers)
    await redis.xdel("later", foreign)  # not a link of the chain: the check would name it
    assert sorted(await _verified(redis, "later", tmp_path)) == sorted(["warm-up", *(f"t{i}" for i in range(8))])


async def test_a_caller_gone_before_its_entry_was_sent_leaves_none(redis: Redis, tmp_path: Path) -> None:
    sink = RedisStreamAuditSink(redis, secret=SECRET, stream="gone")
    assert await sink.record(_event("warm-up"))
    sending = asyncio.create_task(sink.record(_event("sent")))
    waiting = asyncio.create_task(sink.record(_event("gone")))
    await asyncio.sleep(0)  # the first holds the batch lock and is in its round trip; the second waits
    waiting.cancel()
    assert await sending
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert await sink.record(_event("after"))
    assert await _verified(redis, "gone", tmp_path) == ["warm-up", "sent", "after"]


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    calls=st.lists(
        st.tuples(st.sampled_from([0, 1]), st.sampled_from(["plain", "history", "broken"]), st.integers(0, 3)),
        min_size=1,
        max_size=40,
    )
)
async def test_any_mix_of_concurrent_appends_from_two_processes_keeps_one_chain_and_tells_each_caller_the_truth(
    redis: Redis, tmp_path: Path, calls: list[tuple[int, str, int]]
) -> None:
    """Two sinks on one stream (two processes), each call plain or carrying a history write (some of which
    fail), each started after a few event-loop turns: every caller told True has its entry (and its history
    record), every caller told False has neither, and the chain verifies."""
    stream = f"mixed-{next(_streams)}"
    sinks = [RedisStreamAuditSink(redis, secret=SECRET, stream=stream) for _ in range(2)]
    histories = [RedisCallHistory(redis, audit=sink) for sink in sinks]
    broken = history_owner("acme", f"broken-{stream}@acme.example")
    await redis.set(history_key(broken), "not a list")

    async def call(index: int, who: int, kind: str, turns: int) -> bool:
        for _ in range(turns):
            await asyncio.sleep(0)
        tool = f"c{index}"
        if kind == "plain":
            return await sinks[who].record(_event(tool))
        owner = broken if kind == "broken" else history_owner("acme", f"{stream}-{index}@acme.example")
        record = CallRecord(tool=tool, at_ms=1_000, untrusted_text=False, private=False)
        return await histories[who].append_audited(owner, record, rules=RULES, event=_event(tool))

    answers = await asyncio.gather(*(call(i, who, kind, turns) for i, (who, kind, turns) in enumerate(calls)))
    assert answers == [kind != "broken" for _who, kind, _turns in calls]
    landed = await _verified(redis, stream, tmp_path)
    assert sorted(landed) == sorted(f"c{i}" for i, told in enumerate(answers) if told)
    for i, (_who, kind, _turns) in enumerate(calls):
        if kind == "history":
            owner = history_owner("acme", f"{stream}-{i}@acme.example")
            assert [r.tool for r in await histories[0].recent(owner, rules=RULES)] == [f"c{i}"]
    head = await sinks[0].head()
    assert head.seq == len(landed)
    await redis.delete(stream, *audit_keys(stream).values())
