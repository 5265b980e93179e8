"""The registry API's bodies: read within their bound while they stream, and every unreadable one a 422
with the reason, audited (never a 500, never the whole body in memory first)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from starlette.requests import Request

from backends.expenses import expenses_manifest
from gateway.principal import KeyKind
from gateway.registry.manifest import MAX_MANIFEST_BYTES
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.web.request_body import read_bounded
from tests.support.agents import make_key
from tests.support.services import Backend

pytestmark = pytest.mark.anyio

CHUNK = 64 * 1024


async def test_a_body_past_its_bound_is_read_no_further_than_the_chunk_that_passes_it() -> None:
    """The reader pulls chunks from the connection one at a time and stops at the one past the limit: an
    endless body costs at most the limit and one chunk."""
    pulled = 0

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        pulled += 1
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": True}  # never ends

    request = Request({"type": "http", "method": "PUT", "headers": []}, receive)
    assert await read_bounded(request, 4 * CHUNK) is None
    assert pulled == 5


async def test_a_body_within_its_bound_is_read_whole() -> None:
    """A body that fits is returned as sent, across its chunks."""
    parts = [b"ab", b"cd", b""]

    async def receive() -> dict[str, Any]:
        body = parts.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(parts)}

    request = Request({"type": "http", "method": "PUT", "headers": []}, receive)
    assert await read_bounded(request, 4) == b"abcd"


async def _put(mcp_url: str, key: str, content: bytes) -> httpx.Response:
    base = mcp_url.removesuffix("/mcp")
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.put(
            f"{base}/registry/api/adapters/expenses", content=content, headers={"authorization": f"Bearer {key}"}
        )


def _deep(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def _lookaround(expenses: Backend) -> bytes:
    manifest = expenses_manifest(expenses.url)
    tool = manifest["tools"][0]
    tool["input_schema"]["properties"] = {"q": {"type": "string", "pattern": "(?=secret)s", "description": "q"}}
    tool["input_schema"]["required"] = []
    return json.dumps(manifest).encode()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (lambda expenses: b"{" + b" " * (MAX_MANIFEST_BYTES + 1) + b"}", f"larger than the {MAX_MANIFEST_BYTES} bytes"),
        (lambda expenses: _deep(50_000), "nested too deeply"),
        (lambda expenses: b"{not json", "not JSON"),
        (_lookaround, "is not supported: look-around"),
    ],
    ids=["too-large", "too-deep", "not-json", "lookaround-pattern"],
)
async def test_an_unreadable_manifest_is_a_422_that_says_why_and_is_audited(
    redis: Redis, mcp_url: str, expenses: Backend, body: Any, reason: str
) -> None:
    """Too large, nested past what a parser follows, not JSON, or a pattern the validator cannot run: a
    422 whose problem names the cause, audited as a refusal of the registration."""
    service = await make_key(redis, kind=KeyKind.SERVICE, subject="expenses-svc", org="acme", roles=())
    answer = await _put(mcp_url, service, body(expenses))
    assert answer.status_code == 422, answer.text
    problems = answer.json()["error"]["problems"]
    assert any(reason in problem for problem in problems), problems
    events = [e for e in await RedisStreamAuditSink(redis).recent(20) if e.action == "registry.register"]
    assert [(e.outcome, e.code) for e in events] == [("deny", "VALIDATION_ERROR")]
