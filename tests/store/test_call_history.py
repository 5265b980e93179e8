"""The call history behind card provenance: one contract over Redis and in memory, and the read path's use of it."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from gateway.codes import Code
from gateway.errors import UpstreamUnavailableError
from gateway.outbound.backend_client import AiohttpUpstream
from gateway.principal import Principal
from gateway.provenance import CallHistory, CallRecord, HistoryRules, InMemoryCallHistory, history_owner
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.call_history import RedisCallHistory, history_key, taint_key
from gateway.store.client import connect
from gateway.tools.preview import Preview
from tests.support.executors import agent_path
from tests.support.tools import letter_tool, note_tool, read_tool, write_tool

pytestmark = pytest.mark.anyio

RULES = HistoryRules(window_seconds=30, max_reads=5)
ALICE = Principal(subject="alice@acme.example", org="acme", roles=frozenset({"staff"}), key_id="key_a")


def _redis_history(client: Redis) -> RedisCallHistory:
    return RedisCallHistory(client, audit=RedisStreamAuditSink(client))


def _unreachable() -> RedisCallHistory:
    return _redis_history(connect("redis://127.0.0.1:9/0").client)


def _record(index: int) -> CallRecord:
    return CallRecord(tool=f"t{index}", at_ms=1_000 + index, untrusted_text=index % 2 == 0, private=index % 3 == 0)


@pytest.fixture(params=["redis", "memory"])
async def history(request: pytest.FixtureRequest, redis: Redis) -> AsyncIterator[CallHistory]:
    yield _redis_history(redis) if request.param == "redis" else InMemoryCallHistory()


async def test_the_history_keeps_the_latest_reads_oldest_first_per_owner(history: CallHistory) -> None:
    """Past its bound the oldest read goes; another owner's reads are its own."""
    for index in range(8):
        await history.append("acme|alice", _record(index), rules=RULES)
    await history.append("acme|bob", _record(99), rules=RULES)
    assert list(await history.recent("acme|alice", rules=RULES)) == [_record(i) for i in range(3, 8)]
    assert list(await history.recent("acme|bob", rules=RULES)) == [_record(99)]
    assert list(await history.recent("acme|carol", rules=RULES)) == []


async def test_the_redis_history_is_one_hash_tagged_key_that_expires_with_the_window(redis: Redis) -> None:
    """One key per owner, its text hashed into the hash tag, with a TTL of the window after each read."""
    owner = history_owner("acme", "alice@acme.example")
    await _redis_history(redis).append(owner, _record(1), rules=RULES)
    key = history_key(owner)
    assert key.startswith("countersign:calls:{") and key.endswith("}") and "alice" not in key
    assert 0 < await redis.pttl(key) <= 30_000
    assert history_key(history_owner("acme", "bob@acme.example")) != key


async def test_reads_are_remembered_with_what_they_showed_the_model() -> None:
    """An answered read joins the caller's history, private as the tool declares it, and with untrusted text
    only when its result showed the model some: the letter's body (fenced) does, the note's withheld text,
    the letter's blank body and an echo do not. Only the first letter taints its reader."""
    history = InMemoryCallHistory()
    executor, _ = agent_path(
        note_tool(), letter_tool(), read_tool(returns_private_data=False), clients={}, history=history,
        history_rules=RULES,
    )  # fmt: skip
    for tool, text in (("demo_note", "hi"), ("demo_letter", "hi"), ("demo_letter", " "), ("demo_echo", "hi")):
        assert not (await executor.execute(ALICE, tool, {"text": text})).is_error
    owner = history_owner("acme", ALICE.subject)
    mine = await history.recent(owner, rules=RULES)
    assert [(r.tool, r.untrusted_text, r.private) for r in mine] == [
        ("demo_note", False, True),
        ("demo_letter", True, True),
        ("demo_letter", False, True),
        ("demo_echo", False, False),
    ]
    taint = await history.taint(owner)
    assert taint is not None and taint.tool == "demo_letter" and taint.at_ms == mine[1].at_ms


async def test_a_taint_is_kept_apart_from_the_bounded_history_and_never_shortened(history: CallHistory) -> None:
    """Past the history's bound, the tainting read is gone from the reads but the taint stays; a later
    tainting read under a shorter period does not shorten it, one under a longer period lengthens it."""
    owner = history_owner("acme", "alice@acme.example")
    shown = CallRecord(tool="letter", at_ms=1_000, untrusted_text=True, private=True)
    await history.append(owner, shown, rules=RULES)
    for index in range(RULES.max_reads):
        await history.append(owner, _record(2 * index + 1), rules=RULES)
    assert [r.tool for r in await history.recent(owner, rules=RULES)] == [f"t{2 * i + 1}" for i in range(5)]
    first = await history.taint(owner)
    assert first is not None and (first.tool, first.at_ms) == ("letter", 1_000)
    shorter = dataclasses.replace(RULES, taint_seconds=RULES.taint_seconds / 10)
    await history.append(owner, dataclasses.replace(shown, tool="brief", at_ms=2_000), rules=shorter)
    assert await history.taint(owner) == first
    longer = dataclasses.replace(RULES, taint_seconds=RULES.taint_seconds * 10)
    await history.append(owner, dataclasses.replace(shown, tool="long", at_ms=3_000), rules=longer)
    last = await history.taint(owner)
    assert last is not None and last.tool == "long" and last.until_ms > first.until_ms
    assert await history.taint(history_owner("acme", "bob@acme.example")) is None


async def test_the_redis_taint_expires_by_its_period_in_the_historys_slot(redis: Redis) -> None:
    """The taint key shares its history's hash tag and expires one taint period after the read that set it."""
    owner = history_owner("acme", "alice@acme.example")
    shown = CallRecord(tool="letter", at_ms=1_000, untrusted_text=True, private=True)
    await _redis_history(redis).append(owner, shown, rules=RULES)
    key = taint_key(owner)
    assert key.startswith("countersign:taint:{") and key.split("{")[1] == history_key(owner).split("{")[1]
    assert RULES.taint_seconds * 1000 - 5_000 < await redis.pttl(key) <= RULES.taint_seconds * 1000
    await _redis_history(redis).append(owner, _record(1), rules=RULES)  # a read that does not taint
    assert RULES.taint_seconds * 1000 - 5_000 < await redis.pttl(key)


async def test_a_read_that_cannot_be_remembered_is_not_answered_and_the_refusal_is_audited() -> None:
    """With the history's store unreachable, the read's result is withheld (LEDGER_UNAVAILABLE): a later card
    can never look untainted because a read that showed third-party text before it went unrecorded."""
    executor, audit = agent_path(note_tool(), clients={}, history=_unreachable(), history_rules=RULES)
    envelope = await executor.execute(ALICE, "demo_note", {"text": "secret words"})
    assert envelope.is_error and envelope.code is Code.LEDGER_UNAVAILABLE
    assert "secret words" not in str(envelope.for_model())
    [event] = audit.events
    assert (event.outcome, event.code) == ("error", "LEDGER_UNAVAILABLE")


async def test_a_proposal_whose_reads_cannot_be_read_files_no_card_and_the_refusal_is_audited(redis: Redis) -> None:
    """Provenance is read beside the preview; a history that cannot be read still files no card (a card
    must never look untainted for want of its reads): LEDGER_UNAVAILABLE, audited. The same proposal
    with a history that answers files its card."""
    executor, audit = agent_path(
        write_tool(), clients={}, history=_unreachable(), history_rules=RULES, ledger_client=redis
    )
    envelope = await executor.execute(ALICE, "demo_write", {"text": "hi"})
    assert envelope.is_error and envelope.code is Code.LEDGER_UNAVAILABLE
    assert [key async for key in redis.scan_iter(match="cs:*:card:*")] == []
    [event] = audit.events
    assert (event.outcome, event.code) == ("deny", "LEDGER_UNAVAILABLE") and "call history" in event.reason

    answering, _ = agent_path(
        write_tool(), clients={}, history=InMemoryCallHistory(), history_rules=RULES, ledger_client=redis
    )
    filed = await answering.execute(ALICE, "demo_write", {"text": "hi"})
    assert not filed.is_error and filed.card_id is not None
    assert len([key async for key in redis.scan_iter(match="cs:*:card:*")]) == 1


async def test_a_preview_that_fails_is_the_refusal_even_when_the_reads_cannot_be_read_either(redis: Redis) -> None:
    """Both are read at once; the preview's failure is what the caller and the audit are told, as before."""

    async def down(args: object, ctx: object) -> Preview:
        raise UpstreamUnavailableError("backend down", service="demo")

    clients = {"demo": AiohttpUpstream("http://127.0.0.1:9", service="demo")}
    executor, audit = agent_path(
        write_tool(preview=down), clients=clients, history=_unreachable(), history_rules=RULES, ledger_client=redis
    )
    envelope = await executor.execute(ALICE, "demo_write", {"text": "hi"})
    assert envelope.is_error and envelope.code is Code.UPSTREAM_UNAVAILABLE
    [event] = audit.events
    assert (event.outcome, event.code) == ("error", "UPSTREAM_UNAVAILABLE")
    assert [key async for key in redis.scan_iter(match="cs:*:card:*")] == []
