"""A flood past its budget is answered at the MCP edge: real gateways under uvicorn, one real Redis,
the real MCP client, and raw HTTP for the requests a client would not send.

Whether the SDK and the executor were reached is read from the gateway's own counters (the
executor counts each call it answers in ``countersign_tool_calls``; the edge counts its answers in
``countersign_mcp_edge_refusals``) and from the audit trail.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any

import anyio
import httpx
import pytest
from mcp_types import HEADER_MISMATCH
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.audit.events import AuditEvent
from gateway.limits.budgets import Budget, Limits
from gateway.mcp.flood_audit import EDGE
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.telemetry.metrics import REGISTRY
from tests.support.agents import LEGACY, MODERN, agent, error_code, make_key, payload
from tests.support.services import Backend, gateway_settings

pytestmark = pytest.mark.anyio

SLOW = Budget(per_minute=1, burst=3)
"""Three calls at once, then one a minute: nothing refills within a test."""
SUBJECT = "alice@acme.example"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


@contextmanager
def gateways(redis_url: str, backends: dict[str, Backend], count: int = 1) -> Iterator[list[str]]:
    settings = replace(gateway_settings(redis_url, backends), run_worker=False, limits=Limits(reads=SLOW))
    with ExitStack() as stack:
        bases = [stack.enter_context(serve_app_in_thread(create_app(settings), lifespan=True)) for _ in range(count)]
        yield [f"{base}/mcp" for base in bases]


def counted(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def executor_refusals() -> float:
    return counted("countersign_tool_calls_total", tool="rooms_list", code="RATE_LIMITED")


def edge_refusals() -> float:
    return counted("countersign_mcp_edge_refusals_total", code="RATE_LIMITED")


async def audited(redis: Redis, count: int = 500) -> list[AuditEvent]:
    return [e for e in await RedisStreamAuditSink(redis).recent(count) if e.code == "RATE_LIMITED"]


async def edge_events(redis: Redis, refusals: int) -> list[AuditEvent]:
    """The aggregated events of the edge, once they account for `refusals` refusals (polled, bounded)."""
    with anyio.fail_after(5):
        while True:
            events = [e for e in await audited(redis) if e.extra.get("answered") == EDGE]
            if sum(int(e.extra["refusals"]) for e in events) >= refusals:
                return events
            await anyio.sleep(0.05)


def raw_call(token: str, *, name: str = "rooms_list", header_name: str | None = None, **body: Any) -> dict[str, Any]:
    """The keyword arguments of an httpx POST of a 2026-07-28 ``tools/call`` as the SDK client sends it."""
    message = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": {}, "_meta": META},
    }
    headers = {"authorization": f"Bearer {token}", "accept": "application/json, text/event-stream",
               "content-type": "application/json", "mcp-protocol-version": MODERN, "mcp-method": "tools/call",
               "mcp-name": header_name or name}  # fmt: skip
    return {"content": json.dumps({**message, **body}), "headers": headers}


async def test_a_flood_from_one_key_is_refused_at_the_edge_and_audited_in_aggregate(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """The call that spends the last of the burst tells the gateway how long the next must wait; the
    twenty calls after it are answered at the edge, RATE_LIMITED with a retry_after counting down, without
    reaching the SDK's handler or the executor, and the trail accounts for each of them in aggregate."""
    token = await make_key(redis)
    with gateways(redis_url, backends) as [url], anyio.fail_after(30):
        async with agent(url, token, mode=MODERN) as client:
            served = [await client.call_tool("rooms_list", {}) for _ in range(3)]
            executor_before, edge_before = executor_refusals(), edge_refusals()
            flood = [await client.call_tool("rooms_list", {}) for _ in range(20)]
            assert (executor_refusals(), edge_refusals()) == (executor_before, edge_before + 20)
            events = await edge_events(redis, 20)
    assert not any(result.is_error for result in served)
    assert {error_code(result) for result in flood} == {"RATE_LIMITED"}
    waits = [payload(result)["error"]["details"]["retry_after"] for result in flood]
    assert all(0 < wait <= 60 for wait in waits) and waits == sorted(waits, reverse=True)
    assert sum(int(e.extra["refusals"]) for e in events) == 20
    assert {(e.action, e.outcome, e.tool, e.subject) for e in events} == {("tool.call", "deny", "rooms_list", SUBJECT)}
    assert [e for e in await audited(redis) if "answered" not in e.extra] == []  # none went the executor's way


async def test_calls_the_edge_cannot_answer_exactly_as_the_sdk_would_go_on_to_the_sdk(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """While the key's budget is held spent: a body naming another tool than its Mcp-Name header gets the
    SDK's header-mismatch error; an unknown tool reads PERMISSION_DENIED from the executor (a name is never
    probed through the budget); an id of the wrong type is refused by the edge checks; an Accept without
    SSE gets the SDK's 406 and a body not declared JSON its 400. None is counted as an edge refusal."""
    token = await make_key(redis)
    with gateways(redis_url, backends) as [url], anyio.fail_after(30):
        async with httpx.AsyncClient(timeout=10) as http:
            answers = [(await http.post(url, **raw_call(token))).json() for _ in range(5)]
            assert "result" in answers[4] and answers[4]["result"]["isError"]
            before = edge_refusals()
            mismatch = await http.post(url, **raw_call(token, name="rooms_list", header_name="rooms_availability"))
            unknown = await http.post(url, **raw_call(token, name="rooms_nope"))
            bad_id = await http.post(url, **raw_call(token, id=None))
            json_only, plain = raw_call(token), raw_call(token)
            json_only["headers"]["accept"] = "application/json"  # the SDK streams: it needs SSE accepted too
            plain["headers"]["content-type"] = "text/plain"
            not_acceptable = await http.post(url, **json_only)
            not_json = await http.post(url, **plain)
            assert edge_refusals() == before
            edge = (await http.post(url, **raw_call(token))).json()
    assert mismatch.status_code == 400 and mismatch.json()["error"]["code"] == HEADER_MISMATCH
    unknown_result = unknown.json()["result"]
    assert unknown_result["structuredContent"]["error"]["code"] == "PERMISSION_DENIED"
    assert bad_id.status_code == 400
    assert (not_acceptable.status_code, not_json.status_code) == (406, 400)
    assert edge["id"] == 7 and edge["result"]["structuredContent"]["error"]["code"] == "RATE_LIMITED"
    assert edge["result"]["resultType"] == "complete"


async def test_a_handshake_era_session_is_refused_by_the_executor_from_the_limiters_memory(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """2025-11-25 sessions are not answered at the edge: their calls go through the SDK, and are still
    RATE_LIMITED once the budget is spent."""
    token = await make_key(redis)
    with gateways(redis_url, backends) as [url], anyio.fail_after(30):
        async with agent(url, token, mode=LEGACY) as client:
            results = [await client.call_tool("rooms_list", {}) for _ in range(5)]
    assert [r.is_error for r in results] == [False, False, False, True, True]
    assert {error_code(r) for r in results[3:]} == {"RATE_LIMITED"}


async def test_a_budget_spent_through_one_gateway_is_refused_at_the_edge_of_the_other_once_it_has_seen_it(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """Two gateways on one Redis share the budget: the burst spent through the first, the second's first
    call is refused by Redis (through the SDK and its executor) and its next ones at its edge, with the
    same result as the SDK's but for the wait."""
    token = await make_key(redis)
    with gateways(redis_url, backends, count=2) as [one, two], anyio.fail_after(30):
        async with agent(one, token, mode=MODERN) as first, agent(two, token, mode=MODERN) as second:
            spent = [await first.call_tool("rooms_list", {}) for _ in range(3)]
            executor_before, edge_before = executor_refusals(), edge_refusals()
            refused = [await second.call_tool("rooms_list", {}) for _ in range(3)]
            counts = (executor_refusals() - executor_before, edge_refusals() - edge_before)
    assert not any(r.is_error for r in spent)
    assert {error_code(r) for r in refused} == {"RATE_LIMITED"}
    assert counts == (1, 2)
    sdk, edge = payload(refused[0])["error"], payload(refused[1])["error"]
    assert {**sdk, "details": None} == {**edge, "details": None}
    assert 0 < edge["details"]["retry_after"] <= sdk["details"]["retry_after"]
    assert refused[1].meta == refused[0].meta  # the SDK's serverInfo stamp, as the SDK sends it
