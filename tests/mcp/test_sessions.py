"""Quotas at the MCP surface, end to end: real uvicorn, real Redis, the official MCP client.

Sessions per key (2025-11-25 handshake era): N open, the next ``initialize`` refused with HTTP 429 and
QUOTA_EXCEEDED, audited; closing one frees its slot; an idle session is closed and frees its slot.
Open cards per requester: the proposal past the cap is a QUOTA_EXCEEDED tool error and makes no card.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from redis.asyncio import Redis
from starlette.applications import Starlette

from backends.serve import serve_app_in_thread
from gateway.limits.budgets import Limits
from gateway.mcp.sessions import SESSION_QUOTA_ERROR, KeyedSessionManager
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.keys import KeyStore
from tests.support.agents import LEGACY, agent, error_code, make_key, payload
from tests.support.services import Backend, gateway_settings

pytestmark = pytest.mark.anyio

SESSIONS = 2
OPEN_CARDS = 2


@pytest.fixture(scope="module", name="redis_url")
def quiet_database(quiet_redis_url: str) -> str:
    """A database no worker drains: the gateways below run none, so cards stay where they are put."""
    return quiet_redis_url


def _manager(app: Starlette) -> KeyedSessionManager:
    """The session manager behind ``/mcp``."""
    manager = app.state.mcp.session_manager
    assert isinstance(manager, KeyedSessionManager)
    return manager


@contextmanager
def _serve(redis_url: str, backends: dict[str, Backend], limits: Limits) -> Iterator[tuple[str, Starlette]]:
    settings = dataclasses.replace(gateway_settings(redis_url, backends), limits=limits, run_worker=False)
    app = create_app(settings)
    with serve_app_in_thread(app, lifespan=True) as base:
        yield f"{base}/mcp", app


@pytest.fixture(scope="module")
def capped(redis_url: str, backends: dict[str, Backend]) -> Iterator[tuple[str, Starlette]]:
    """A gateway holding each key to two sessions and each requester to two open cards."""
    with _serve(redis_url, backends, Limits(sessions_per_key=SESSIONS, open_cards_per_requester=OPEN_CARDS)) as served:
        yield served


async def _key_id(redis: Redis, token: str) -> str:
    principal = await KeyStore(redis).resolve(token)
    assert principal is not None
    return principal.key_id


async def _refusal(url: str, token: str) -> Any:
    """The error of an ``initialize`` the gateway refuses (fails the test if it opens a session)."""
    with pytest.RaisesGroup(MCPError, flatten_subgroups=True) as refused:
        async with agent(url, token, LEGACY):
            pass
    group: BaseException = refused.value
    while isinstance(group, BaseExceptionGroup):
        [group] = group.exceptions
    assert isinstance(group, MCPError)
    return group.error


async def test_the_session_past_the_cap_is_refused_audited_and_a_closed_one_frees_its_slot(
    redis: Redis, capped: tuple[str, Starlette]
) -> None:
    """Two sessions open for one key: the third initialize is refused with QUOTA_EXCEEDED and the limit, and
    audited; another key is not held back; once one session is closed (DELETE) a new one opens."""
    url, app = capped
    token, other = await make_key(redis), await make_key(redis, subject="dan@acme.example")
    key_id = await _key_id(redis, token)
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(agent(url, token, LEGACY))
        async with agent(url, token, LEGACY) as second:
            await second.list_tools()  # the surface holds a listing session, to tell it of catalog changes
            assert _manager(app).open_sessions(key_id) == SESSIONS
            error = await _refusal(url, token)
            assert error.code == SESSION_QUOTA_ERROR
            assert error.data is not None and 1 <= error.data.pop("retry_after") <= 600
            assert error.data == {"code": "QUOTA_EXCEEDED", "limit": SESSIONS, "open": SESSIONS, "retryable": True}
            assert error.message.startswith("Too many open sessions for this key: retry in ")
            async with agent(url, other, LEGACY) as theirs:
                assert not (await theirs.call_tool("rooms_list", {})).is_error
            assert not (await second.call_tool("rooms_list", {})).is_error  # the open ones are unaffected
        assert _manager(app).open_sessions(key_id) == SESSIONS - 1
        async with agent(url, token, LEGACY) as again:
            assert not (await again.call_tool("rooms_list", {})).is_error
        assert not (await first.call_tool("rooms_list", {})).is_error
    assert _manager(app).open_sessions(key_id) == 0
    assert app.state.mcp._sessions == {}  # nothing holds a closed session any more
    [event] = [e for e in await RedisStreamAuditSink(redis).recent(50) if e.action == "mcp.session"]
    assert (event.outcome, event.code, event.key_id) == ("deny", "QUOTA_EXCEEDED", key_id)
    assert event.extra == {"limit": str(SESSIONS), "open": str(SESSIONS)}


async def test_the_2026_era_opens_no_session_and_is_not_held_to_the_cap(
    redis: Redis, capped: tuple[str, Starlette]
) -> None:
    """Per-request 2026-07-28 calls hold no session, so a key at its session cap still calls in that era."""
    url, app = capped
    token = await make_key(redis)
    async with agent(url, token, LEGACY), agent(url, token, LEGACY):
        async with agent(url, token, "2026-07-28") as modern:
            assert not (await modern.call_tool("rooms_list", {})).is_error
        assert _manager(app).open_sessions(await _key_id(redis, token)) == SESSIONS


async def test_an_idle_session_is_closed_and_frees_its_slot(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """A client that leaves without DELETE leaves an idle session: after the idle timeout it is gone (its
    id answers 404) and the key, held to one session, can open another."""
    with _serve(redis_url, backends, Limits(sessions_per_key=1, session_idle_seconds=0.5)) as (url, app):
        token = await make_key(redis)
        key_id = await _key_id(redis, token)
        async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=10) as http:
            transport = streamable_http_client(url, http_client=http, terminate_on_close=False)
            async with Client(transport, mode=LEGACY) as client:  # type: ignore[arg-type]
                assert not (await client.call_tool("rooms_list", {})).is_error
                await client.list_tools()
            assert _manager(app).open_sessions(key_id) == 1
            [session_id] = list(_manager(app)._key_of)
            with anyio.fail_after(10):
                while _manager(app).open_sessions(key_id):
                    await anyio.sleep(0.05)
            stale = await http.post(url, json=_PING, headers={"mcp-session-id": session_id, **_HEADERS})
            assert stale.status_code == 404
            assert app.state.mcp._sessions == {}
        async with agent(url, token, LEGACY) as again:
            assert not (await again.call_tool("rooms_list", {})).is_error


async def test_the_refused_session_says_when_a_slot_frees_with_retry_after(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """The quota frees itself as a session idles out: the 429 is retryable, with a ``Retry-After`` no later
    than the idle timeout, and the client that waits that long gets its session."""
    with _serve(redis_url, backends, Limits(sessions_per_key=1, session_idle_seconds=2)) as (url, _app):
        token = await make_key(redis)
        headers = {"authorization": f"Bearer {token}", "accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient(headers=headers, timeout=10) as http:
            opened = await http.post(url, json=_INITIALIZE)  # a client that never sends DELETE
            assert opened.status_code == 200
            refused = await http.post(url, json=_INITIALIZE)
            assert refused.status_code == 429
            wait = int(refused.headers["retry-after"])
            assert 1 <= wait <= 2
            error = refused.json()["error"]
            assert error["data"]["retryable"] is True and error["data"]["retry_after"] == wait
            with anyio.fail_after(10):  # polled, bounded: the slot frees within the idle timeout
                while (again := await http.post(url, json=_INITIALIZE)).status_code == 429:
                    await anyio.sleep(0.1)
            assert again.status_code == 200


_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
_PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
_HEADERS = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}


async def test_the_proposal_past_the_open_card_cap_is_a_quota_error_and_makes_no_card(
    redis: Redis, capped: tuple[str, Starlette]
) -> None:
    """Two open cards at a cap of two: the third proposal is QUOTA_EXCEEDED with the limit and the count,
    audited, with no card made; the same proposal as an open card still answers with that card."""
    url, _app = capped
    token = await make_key(redis)
    async with agent(url, token) as client:
        receipts = [payload(await client.call_tool("rooms_book", _booking(f"2026-12-2{n}"))) for n in range(2)]
        refused = await client.call_tool("rooms_book", _booking("2026-12-24"))
        again = payload(await client.call_tool("rooms_book", _booking("2026-12-20")))
    assert error_code(refused) == "QUOTA_EXCEEDED"
    error = payload(refused)["error"]
    assert error["details"] == {"limit": OPEN_CARDS, "open": OPEN_CARDS} and error["retryable"] is False
    assert again["card_id"] == receipts[0]["card_id"] and again["existing"] is True
    assert len([key async for key in redis.scan_iter(match="cs:{cs*}:card:*")]) == OPEN_CARDS
    audited = [e for e in await RedisStreamAuditSink(redis).recent(50) if e.code == "QUOTA_EXCEEDED"]
    assert [(e.action, e.outcome, e.tool) for e in audited] == [("tool.call", "deny", "rooms_book")]


def _booking(day: str) -> dict[str, str]:
    return {"room_id": "room-eos", "date": day, "start": "09:00", "end": "10:00", "title": "Quota"}
