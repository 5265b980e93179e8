"""The `countersign` CLI against a real Redis: keys and the audit trail."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from redis.asyncio import Redis

from gateway.audit.events import AUDIT_STREAM
from gateway.cli.main import main
from gateway.principal import KeyKind
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.keys import KeyStore
from tests.support.agents import agent, make_key
from tests.support.examples import examples
from tests.support.hostile_text import FORGED_LINE, TERMINAL_ESCAPES, hostile_text
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio

PRODUCTION = {"COUNTERSIGN_AUDIT_SECRET": TEST_AUDIT_SECRET}
"""A Redis URL makes the CLI production: the audit secret is required, as for serve."""


def _run(redis_url: str, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args), PRODUCTION | {"COUNTERSIGN_REDIS_URL": redis_url})
    captured = capsys.readouterr()
    return status, captured.out, captured.err


async def test_keys_create_prints_the_key_once_and_stores_only_its_hash(
    redis: Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plaintext key is printed once; Redis holds its hash, never the key."""
    status, out, err = await _to_thread(
        _run, redis_url, capsys, "keys", "create", "--kind", "agent", "--subject", "alice@acme.example",
        "--org", "acme", "--roles", "staff,support",
    )  # fmt: skip
    assert status == 0
    token = out.strip()
    assert token.startswith("csk_agent_") and "shown once" in err
    dump = b"".join([k + json.dumps({x.decode(): y.decode() for x, y in (await redis.hgetall(k)).items()}).encode()
                     for k in await redis.keys("countersign:key*") if await redis.type(k) == b"hash"])  # fmt: skip
    assert token.encode() not in dump
    principal = await KeyStore(redis).resolve(token)
    assert principal is not None and principal.roles == frozenset({"staff", "support"})


async def test_keys_list_and_revoke(redis: Redis, redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A revoked key is listed as revoked and no longer resolves; revoking an unknown id fails."""
    token, record = await KeyStore(redis).create(kind=KeyKind.AGENT, subject="bob@acme.example", org="acme", roles=())
    status, out, _ = await _to_thread(_run, redis_url, capsys, "keys", "revoke", record.key_id)
    assert status == 0 and record.key_id in out
    status, out, _ = await _to_thread(_run, redis_url, capsys, "keys", "list")
    assert status == 0 and "revoked" in out and "bob@acme.example" in out and token not in out
    assert await KeyStore(redis).resolve(token) is None
    status, _, err = await _to_thread(_run, redis_url, capsys, "keys", "revoke", "key_nope")
    assert status == 1 and "no key" in err


async def test_audit_tail_shows_calls_and_key_events(
    redis: Redis, redis_url: str, mcp_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every call and key operation is in the audit trail, as text or JSON, without tokens."""
    status, out, _ = await _to_thread(
        _run, redis_url, capsys, "keys", "create", "--kind", "agent", "--subject", "dora@acme.example",
        "--org", "acme", "--roles", "staff",
    )  # fmt: skip
    token = out.strip()
    async with agent(mcp_url, token) as client:
        await client.call_tool("rooms_list", {})
        await client.call_tool("orders_refund_eligibility", {"order_id": "ord-1001"})
    status, out, _ = await _to_thread(_run, redis_url, capsys, "audit", "tail", "-n", "10", "--json")
    events = [json.loads(line) for line in out.splitlines()]
    assert [(e["action"], e["outcome"], e.get("code", "")) for e in events] == [
        ("key.create", "ok", ""),
        ("tool.call", "ok", ""),
        ("tool.call", "deny", "PERMISSION_DENIED"),
    ]
    assert token not in out
    status, out, _ = await _to_thread(_run, redis_url, capsys, "audit", "tail")
    assert "tool=orders_refund_eligibility" in out and "code=PERMISSION_DENIED" in out


async def _to_thread(run: Callable[..., tuple[int, str, str]], *args: Any) -> tuple[int, str, str]:
    """The CLI runs its own event loop (asyncio.run), so it is called from a worker thread."""
    return await anyio.to_thread.run_sync(lambda: run(*args))


def _audit_tail(redis_url: str, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["audit", "tail", "-n", "1000", *args], PRODUCTION | {"COUNTERSIGN_REDIS_URL": redis_url})
    return status, out.getvalue()


async def _hostile_calls(redis_url: str, mcp_url: str, text: str) -> int:
    """Flush, then call a tool named `text` and a real tool with `text` in its arguments; the audit length."""
    client = Redis.from_url(redis_url)
    try:
        await client.flushdb()
        token = await make_key(client)
        async with agent(mcp_url, token) as mcp:
            await mcp.call_tool(text, {text: text})
            await mcp.call_tool("rooms_availability", {"room_id": text, "date": text})
            await mcp.call_tool("rooms_book", {"room_id": "room-atlas", "date": "2027-02-01", "start": "09:00",
                                               "end": "10:00", "title": text})  # fmt: skip
        return int(await client.xlen(AUDIT_STREAM))
    finally:
        await client.aclose()


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(FORGED_LINE)
@example(TERMINAL_ESCAPES)
@given(text=hostile_text)
def test_audit_tail_prints_one_line_per_event_whatever_an_agent_calls_its_tool(
    redis_url: str, mcp_url: str, text: str
) -> None:
    """Control characters in a tool name or arguments reach `audit tail` escaped: one line per event, none raw."""
    stored = anyio.run(_hostile_calls, redis_url, mcp_url, text)
    for as_json in (False, True):
        status, out = _audit_tail(redis_url, *(["--json"] if as_json else []))
        lines = out.split("\n")
        assert status == 0 and lines.pop() == ""
        assert len(lines) == stored >= 3
        assert all(ch.isprintable() for line in lines for ch in line), lines
        if as_json:
            assert [json.loads(line).get("tool") for line in lines][-3] == text


async def test_keys_create_refuses_a_subject_that_would_drive_the_terminal(
    redis: Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An escape sequence in `--subject` is refused with status 1, and no key is made."""
    subject = f"root@acme.example{TERMINAL_ESCAPES}"
    status, out, err = await _to_thread(
        _run, redis_url, capsys, "keys", "create", "--kind", "admin", "--subject", subject,
        "--org", "acme", "--roles", "approver",
    )  # fmt: skip
    assert (status, out) == (1, "") and "countersign:" in err
    assert all(ch.isprintable() for line in err.splitlines() for ch in line)
    assert await KeyStore(redis).list() == []


async def test_keys_create_refuses_a_subject_mixing_scripts_unless_the_operator_allows_it(
    redis: Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``\u0430lice`` with a Cyrillic ``а`` is refused (status 1, no key, the refusal audited with its code);
    with --allow-mixed-scripts the operator gets the key, which is still alice's identity for every refusal."""
    subject = "\u0430lice@acme.example"
    args = ("keys", "create", "--kind", "admin", "--subject", subject, "--org", "acme", "--roles", "approver")
    status, out, err = await _to_thread(_run, redis_url, capsys, *args)
    assert (status, out) == (1, "") and "--allow-mixed-scripts" in err
    assert await KeyStore(redis).list() == []
    refused = [e for e in await RedisStreamAuditSink(redis).recent(10) if e.action == "key.create"]
    assert [(e.outcome, e.code) for e in refused] == [("deny", "VALIDATION_ERROR")]
    status, out, _ = await _to_thread(_run, redis_url, capsys, *args, "--allow-mixed-scripts")
    assert status == 0 and [r.subject for r in await KeyStore(redis).list()] == [subject]


async def test_subjects_revoke_stops_every_key_of_the_person_under_any_spelling(
    redis: Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Revoking ``ALICE@acme.example`` stops alice's keys, is listed, and is audited; bob's key goes on working."""
    store = KeyStore(redis)
    alice, _ = await store.create(kind=KeyKind.AGENT, subject="alice@acme.example", org="acme", roles=())
    bob, _ = await store.create(kind=KeyKind.AGENT, subject="bob@acme.example", org="acme", roles=())
    status, out, _ = await _to_thread(
        _run, redis_url, capsys, "subjects", "revoke", "ALICE@acme.example", "--org", "acme"
    )
    assert status == 0 and "alice@acme.example" in out
    assert await store.resolve(alice) is None and await store.resolve(bob) is not None
    status, out, _ = await _to_thread(_run, redis_url, capsys, "subjects", "list")
    assert status == 0 and "alice@acme.example" in out
    revoked = [e for e in await RedisStreamAuditSink(redis).recent(10) if e.action == "subject.revoke"]
    assert [(e.outcome, e.subject, e.org) for e in revoked] == [("ok", "alice@acme.example", "acme")]
