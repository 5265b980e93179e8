"""Limits on every door: following a task spends from the caller's read budget, and its polls are audited in
aggregate. A real gateway under uvicorn with a small read budget, real Redis, the SDK's client in both eras."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from urllib.parse import urlsplit, urlunsplit

import pytest
from mcp.shared.exceptions import MCPError
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.limits.budgets import Budget, Limits
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from tests.support.agents import LEGACY, MODERN, agent, make_key
from tests.support.services import Backend, gateway_settings
from tests.support.signing import ensure_signing_key
from tests.support.task_clients import task_agent

pytestmark = pytest.mark.anyio

BURST = 6
"""The read budget's burst: a handful of calls at once, then one a minute."""


@pytest.fixture(scope="module")
def small_budget_url(redis_server_url: str, backends: dict[str, Backend]) -> Iterator[tuple[str, str]]:
    """A gateway whose callers may make `BURST` reads at once, and its database."""
    redis_url = urlunsplit(urlsplit(redis_server_url)._replace(path="/7"))
    settings = gateway_settings(redis_url, backends)
    settings = replace(settings, run_worker=False, limits=Limits(reads=Budget(per_minute=1, burst=BURST)))
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        yield f"{base}/mcp", redis_url


@pytest.fixture
async def store(small_budget_url: tuple[str, str]) -> AsyncIterator[Redis]:
    client = Redis.from_url(small_budget_url[1], decode_responses=False)
    try:
        await client.flushdb()
        await ensure_signing_key(client)
        yield client
    finally:
        await client.aclose()


@pytest.mark.parametrize("era", [MODERN, LEGACY])
async def test_task_polls_spend_the_read_budget_shared_with_read_tools_and_are_audited_in_aggregate(
    small_budget_url: tuple[str, str], store: Redis, era: str
) -> None:
    """A client that polls its task as fast as it can is refused RATE_LIMITED (with the wait) once the read budget
    is spent, and so is its next read tool call: one budget for every door that reads. Its polls are in the trail
    as the first one and the first refusal, not one entry per poll."""
    mcp_url, _ = small_budget_url
    subject = f"poller-{era}@acme.example"
    token = await make_key(store, roles=("staff",), subject=subject)
    booking = {"room_id": "room-eos", "date": "2027-04-01", "start": "09:00", "end": "09:30", "title": "Poll"}
    answered, refused = 0, None
    async with task_agent(mcp_url, token, era) as client:
        created = await client.propose("rooms_book", booking)  # spends from the proposal budget, not reads
        task_id = client.task_id(created)
        for _poll in range(3 * BURST):
            try:
                await client.get(task_id)
                answered += 1
            except MCPError as error:
                refused = error
                break
    assert refused is not None and 0 < answered <= BURST
    assert refused.error.data["code"] == "RATE_LIMITED" and refused.error.data["retry_after"] > 0
    async with agent(mcp_url, token) as reader:
        listing = await reader.call_tool("rooms_list", {})
    assert listing.is_error and listing.structured_content is not None
    assert listing.structured_content["error"]["code"] == "RATE_LIMITED"
    polls = [
        e for e in await RedisStreamAuditSink(store).recent(100) if e.action == "task.get" and e.subject == subject
    ]
    assert [(e.outcome, e.code) for e in polls] == [("ok", ""), ("deny", "RATE_LIMITED")]
    assert polls[0].extra["status"] == "working"


async def test_listing_tools_is_under_a_budget_of_the_callers(small_budget_url: tuple[str, str], store: Redis) -> None:
    """tools/list does work for its caller too: past its budget (the read budget's rate, a bucket of its own) it is
    a JSON-RPC error with RATE_LIMITED and the wait, audited as tools.list; another person's listing is not affected."""
    mcp_url, _ = small_budget_url
    token = await make_key(store, roles=("staff",), subject="lister@acme.example")
    refused = None
    async with agent(mcp_url, token, LEGACY) as client:  # a session: the 2026 client caches a listing
        for _listing in range(3 * BURST):
            try:
                await client.list_tools()
            except MCPError as error:
                refused = error
                break
    assert refused is not None and refused.error.data["code"] == "RATE_LIMITED"
    assert refused.error.data["retry_after"] > 0
    [event] = [e for e in await RedisStreamAuditSink(store).recent(100) if e.action == "tools.list"]
    assert (event.outcome, event.code, event.subject) == ("deny", "RATE_LIMITED", "lister@acme.example")
    other = await make_key(store, roles=("staff",), subject="someone-else@acme.example")
    async with agent(mcp_url, other) as client:
        assert (await client.list_tools()).tools
