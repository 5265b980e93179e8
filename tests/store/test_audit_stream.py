"""Audit events as stored in a real Redis stream: every field is bounded, whoever wrote it."""

from __future__ import annotations

import hashlib
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from gateway.audit.events import AUDIT_STREAM, MAX_FIELD_CHARS, AuditEvent
from gateway.store.audit_stream import RedisStreamAuditSink
from tests.support.agents import agent, make_key
from tests.support.examples import examples
from tests.support.services import TEST_AUDIT_SECRET

AUDIT_SECRET = TEST_AUDIT_SECRET.encode()

pytestmark = pytest.mark.anyio

TEXT_FIELDS = ("action", "outcome", "subject", "org", "key_id", "tool", "code", "reason")

long_text = st.tuples(st.text(min_size=1, max_size=8), st.integers(MAX_FIELD_CHARS - 2, 4 * MAX_FIELD_CHARS)).map(
    lambda spec: (spec[0] * (spec[1] // len(spec[0]) + 1))[: spec[1]]
)
"""Strings from just under the bound to well past it, built by repetition so they are quick to make."""


def _is_kept_as_prefix_and_hash(original: str, stored: str) -> bool:
    if len(original) <= MAX_FIELD_CHARS:
        return stored == original
    digest = hashlib.sha256(original.encode()).hexdigest()
    kept = stored[: MAX_FIELD_CHARS // 2]
    return original.startswith(kept) and digest[:16] in stored and str(len(original)) in stored


async def _stored(redis_url: str, event: AuditEvent) -> dict[str, str]:
    client = Redis.from_url(redis_url, decode_responses=True)
    try:
        await client.delete(AUDIT_STREAM)
        await RedisStreamAuditSink(client, secret=AUDIT_SECRET).record(event)
        [(_id, fields)] = await client.xrange(AUDIT_STREAM)
        return dict(fields)
    finally:
        await client.aclose()


@settings(max_examples=examples(40), deadline=None)
@given(values=st.lists(long_text, min_size=len(TEXT_FIELDS) + 2, max_size=len(TEXT_FIELDS) + 2))
def test_every_stored_field_is_bounded_and_a_long_one_keeps_its_prefix_and_hash(
    quiet_redis_url: str, values: list[str]
) -> None:
    """Each text field and each `extra` key and value is at most MAX_FIELD_CHARS once stored (its stored
    name at most one character more), and reads back as its prefix and hash."""
    texts, (extra_key, extra_value) = dict(zip(TEXT_FIELDS, values, strict=False)), values[-2:]
    event: Any = AuditEvent(**texts, extra={extra_key: extra_value})
    stored = anyio.run(_stored, quiet_redis_url, event)
    assert all(len(name) <= MAX_FIELD_CHARS + 1 and len(value) <= MAX_FIELD_CHARS for name, value in stored.items())
    read = AuditEvent.from_fields("0-1", stored)
    for name, original in texts.items():
        assert _is_kept_as_prefix_and_hash(original, getattr(read, name))
    [(key, value)] = read.extra.items()
    assert len(key) <= MAX_FIELD_CHARS and len(value) <= MAX_FIELD_CHARS
    assert _is_kept_as_prefix_and_hash(extra_key, key) and _is_kept_as_prefix_and_hash(extra_value, value)


def test_two_long_values_that_share_their_prefix_are_stored_apart() -> None:
    """The hash tells apart values the kept prefix cannot."""
    first, second = "a" * 100_000, "a" * 99_999 + "b"
    stored = [AuditEvent(action="tool.call", outcome="deny", tool=name).to_fields()["tool"] for name in (first, second)]
    assert stored[0] != stored[1]


async def test_a_100_kb_tool_name_from_an_agent_is_stored_bounded(redis: Redis, mcp_url: str) -> None:
    """A real MCP call with a huge tool name is refused and audited with a bounded name."""
    token = await make_key(redis)
    name = "rooms_list" + "x" * 100_000
    async with agent(mcp_url, token) as client:
        result = await client.call_tool(name, {})
    assert result.is_error
    [event] = [e for e in await RedisStreamAuditSink(redis).recent(10) if e.action == "tool.call"]
    assert event.code == "PERMISSION_DENIED" and len(event.tool) <= MAX_FIELD_CHARS
    assert _is_kept_as_prefix_and_hash(name, event.tool)


async def _bytes_per_entry(redis_url: str, extra: dict[str, str], count: int) -> float:
    client = Redis.from_url(redis_url)
    try:
        await client.delete("test:audit:size", "{test:audit:size}:head")
        sink = RedisStreamAuditSink(client, secret=AUDIT_SECRET, stream="test:audit:size")
        for n in range(count):
            await sink.record(AuditEvent(action="card.propose", outcome="ok", subject="bench@acme.example", org="acme",
                                         key_id="key_0123456789ab", tool="rooms_book", latency_ms=1.234,
                                         extra={"card_id": f"crd_{n % 16}_{n:032x}", **extra}))  # fmt: skip
        return int(await client.memory_usage("test:audit:size", samples=0) or 0) / count
    finally:
        await client.delete("test:audit:size", "{test:audit:size}:head")
        await client.aclose()


async def test_a_proposal_entry_takes_at_most_150_bytes_of_redis(quiet_redis_url: str) -> None:
    """The size target of `bench/card_bytes.py` (issue 15), for the issue's entry and the executor's."""
    assert await _bytes_per_entry(quiet_redis_url, {}, 1000) <= 150
    assert await _bytes_per_entry(quiet_redis_url, {"existing": "false", "state": "PENDING"}, 1000) <= 150
