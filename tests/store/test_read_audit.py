"""An answered read's history write rides in its audit append: one script, both or neither, chain intact."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from gateway.archives.audit_archive import AuditArchive
from gateway.audit.events import AUDIT_STREAM, AuditEvent
from gateway.provenance import CallRecord, HistoryRules, history_owner
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.audit_trail import AuditTrail
from gateway.store.call_history import RedisCallHistory, history_key
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio

SECRET = TEST_AUDIT_SECRET.encode()
RULES = HistoryRules(window_seconds=30, max_reads=5)
OWNER = history_owner("acme", "alice@acme.example")


@pytest.fixture
def redis(own_redis: Redis) -> Redis:
    """A server of this module's own (conftest's `own_redis`): the round-trip count reads its command statistics."""
    return own_redis


def _event(tool: str) -> AuditEvent:
    return AuditEvent(action="tool.call", outcome="ok", subject="alice@acme.example", org="acme", tool=tool)


def _record(tool: str) -> CallRecord:
    return CallRecord(tool=tool, at_ms=1_000, untrusted_text=True, private=False)


async def _script_calls(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def _verified(redis: Redis, tmp_path: Path) -> int:
    verdict = await AuditTrail(RedisStreamAuditSink(redis, secret=SECRET), AuditArchive(tmp_path)).verify(SECRET)
    assert verdict.broken is None
    return verdict.live


async def test_a_read_is_remembered_and_audited_in_one_script_call(redis: Redis, tmp_path: Path) -> None:
    """After the scripts are loaded, each answered read costs one EVALSHA: its event and its history record."""
    sink = RedisStreamAuditSink(redis, secret=SECRET)
    history = RedisCallHistory(redis, audit=sink)
    assert await history.append_audited(OWNER, _record("t1"), rules=RULES, event=_event("t1"))
    before = await _script_calls(redis)
    assert await history.append_audited(OWNER, _record("t2"), rules=RULES, event=_event("t2"))
    assert await _script_calls(redis) - before == 1
    assert [record.tool for record in await history.recent(OWNER, rules=RULES)] == ["t1", "t2"]
    assert 0 < await redis.pttl(history_key(OWNER)) <= 30_000
    assert [event.tool for event in await sink.recent(10)] == ["t1", "t2"]
    assert await _verified(redis, tmp_path) == 2


async def test_a_stale_head_retries_the_append_without_remembering_the_read_twice(redis: Redis, tmp_path: Path) -> None:
    """Another process appended since this one last did: the head check fails before any write, the entry is
    MACed again on the new head, and the read is in the history once."""
    mine = RedisStreamAuditSink(redis, secret=SECRET)
    history = RedisCallHistory(redis, audit=mine)
    assert await history.append_audited(OWNER, _record("t1"), rules=RULES, event=_event("t1"))
    assert await RedisStreamAuditSink(redis, secret=SECRET).record(_event("elsewhere"))
    assert await history.append_audited(OWNER, _record("t2"), rules=RULES, event=_event("t2"))
    assert [record.tool for record in await history.recent(OWNER, rules=RULES)] == ["t1", "t2"]
    assert [event.tool for event in await mine.recent(10)] == ["t1", "elsewhere", "t2"]
    assert await _verified(redis, tmp_path) == 3


async def test_a_history_that_cannot_take_the_read_leaves_no_audit_entry(redis: Redis) -> None:
    """The history write runs before the XADD in the same script: when it fails, the answer is False (the event
    goes to the log), the stream and its head are untouched, and the next append chains on as before."""
    sink = RedisStreamAuditSink(redis, secret=SECRET)
    history = RedisCallHistory(redis, audit=sink)
    await redis.set(history_key(OWNER), "not a list")  # LPUSH answers WRONGTYPE
    assert not await history.append_audited(OWNER, _record("t1"), rules=RULES, event=_event("t1"))
    assert await redis.xlen(AUDIT_STREAM) == 0
    assert (await sink.head()).seq == 0
    other = history_owner("acme", "bob@acme.example")
    assert await history.append_audited(other, _record("t2"), rules=RULES, event=_event("t2"))
    assert [event.tool for event in await sink.recent(10)] == ["t2"]
    assert (await sink.head()).seq == 1


async def test_every_field_is_stored_byte_for_byte_whatever_its_text(redis: Redis, tmp_path: Path) -> None:
    """The event travels to the script as one packed argument and its sizes in bytes: multibyte text, digits,
    commas, separators and newlines come out of the stream exactly as the event's fields went in."""
    sink = RedisStreamAuditSink(redis, secret=SECRET)
    event = AuditEvent(action="tool.call", outcome="deny", subject="zoë@例え.example", org="acme,1,2", tool="t",
                       code="VALIDATION_ERROR", reason="12,34\n\"quoted\" é 🙂 %d+ \\", latency_ms=0.25,
                       extra={"acting_client": "cl,ient", "note": "ÿ" * 300})  # fmt: skip
    assert await RedisCallHistory(redis, audit=sink).append_audited(OWNER, _record("t"), rules=RULES, event=event)
    [(_, stored)] = await sink.entries("", 10)
    assert {name: value for name, value in stored.items() if name not in {"m", "q"}} == event.to_stored()
    assert await _verified(redis, tmp_path) == 1
