"""The `countersign` CLI against a real Redis: keys and the audit trail."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from gateway.cli import main
from gateway.principal import KeyKind
from gateway.store.keys import KeyStore
from tests.support.agents import agent

pytestmark = pytest.mark.anyio


def _run(redis_url: str, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args), {"COUNTERSIGN_REDIS_URL": redis_url})
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
