"""The lean request path (`gateway.mcp_direct_calls`) answers exactly as the SDK would, and only where it may.

Two real gateways under uvicorn on one real Redis serve the conformance fixture tools (reads with a
header-mirrored argument, a JSON Schema 2020-12 schema, a backend refusal) from a real backend: one
serves 2026-era reads directly, the other sends every request through the SDK
(``mcp_direct_calls = false``). Generated requests, well-formed and not, go to both over raw HTTP and
must get the same status, content type and body, byte for byte. Which requests the direct path takes
is read off the SDK's ASGI app, counted while the tests run: a read it serves never reaches it;
writes, card tools, unknown names, the handshake era and requests the checks do not pass all do.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from redis.asyncio import Redis
from starlette.datastructures import Secret
from starlette.types import Receive, Scope, Send

from backends.serve import serve_app_in_thread
from gateway.app import create_app
from gateway.limits import Budget, Limits
from gateway.settings import AdapterSettings, OrgSettings, Settings
from tests.support.agents import LEGACY, MODERN, agent, make_key, payload
from tests.support.conformance import ADAPTERS, TOOLS, create_fixture_backend
from tests.support.redis_server import start_redis_server
from tests.support.services import TEST_AUDIT_SECRET

ORG = "conformance"
PLENTY = Budget(per_minute=1_000_000, burst=1_000_000)
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
ACCEPT = "application/json, text/event-stream"


class SdkEntries:
    """The requests that reached the SDK's ASGI app (either era), across the gateways' threads: each
    one's ``Mcp-Method`` header (empty for the handshake era, which sends none)."""

    def __init__(self) -> None:
        self.methods: list[str] = []
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        return len(self.methods)

    @property
    def calls(self) -> int:
        return self.methods.count("tools/call")

    @contextmanager
    def counting(self) -> Iterator[None]:
        entry = StreamableHTTPASGIApp.__call__

        async def counted(app: StreamableHTTPASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
            method = dict(scope["headers"]).get(b"mcp-method", b"").decode()
            with self._lock:
                self.methods.append(method)
            await entry(app, scope, receive, send)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(StreamableHTTPASGIApp, "__call__", counted)
            yield


@dataclass(frozen=True)
class Pair:
    direct: str
    sdk: str
    token: str
    entries: SdkEntries


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    """The two gateways (direct calls on, and off) and an agent key both accept."""
    entries = SdkEntries()
    with ExitStack() as stack:
        stack.enter_context(entries.counting())
        redis_url = stack.enter_context(start_redis_server(appendonly=True))
        backend = stack.enter_context(serve_app_in_thread(create_fixture_backend()))
        token, key = Secret(secrets.token_urlsafe(16)), Secret(secrets.token_urlsafe(32))
        base = Settings(
            redis_url=redis_url,
            audit_secret=Secret(TEST_AUDIT_SECRET),
            adapters={name: AdapterSettings(name=name, url=backend, token=token, signing_key=key) for name in ADAPTERS},
            orgs=(OrgSettings(name=ORG, adapters=frozenset(ADAPTERS), roles=frozenset({"staff"})),),
            run_worker=False,
            limits=Limits(reads=PLENTY),
        )
        direct, sdk = (
            stack.enter_context(
                serve_app_in_thread(create_app(replace(base, mcp_direct_calls=on), tools=TOOLS), lifespan=True)
            )  # fmt: skip
            for on in (True, False)
        )
        yield Pair(f"{direct}/mcp", f"{sdk}/mcp", asyncio.run(_key(redis_url)), entries)


async def _key(redis_url: str) -> str:
    client = Redis.from_url(redis_url)
    try:
        return await make_key(client, org=ORG, subject="suite@conformance.example")
    finally:
        await client.aclose()


def call(
    token: str,
    *,
    tool: str = "test_simple_text",
    arguments: Any = None,
    request_id: Any = 1,
    header_name: str | None = None,
    meta: Any = META,
    accept: str = ACCEPT,
    content_type: str = "application/json",
    extra_headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The keyword arguments of an httpx POST of a 2026-era ``tools/call``, as the SDK client sends one
    by default; each argument changes one part of it (`arguments` None: no ``arguments`` member)."""
    params: dict[str, Any] = {"name": tool, "_meta": meta}
    if arguments is not None:
        params["arguments"] = arguments
    if meta is None:
        del params["_meta"]
    headers = {"authorization": f"Bearer {token}", "accept": accept, "content-type": content_type,
               "mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": header_name or tool,
               **(extra_headers or {})}  # fmt: skip
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return {"content": json.dumps(body), "headers": headers}


def answer(response: httpx.Response) -> tuple[int, str | None, bytes]:
    return response.status_code, response.headers.get("content-type"), response.content


_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12).map(str.strip)


@st.composite
def _valid(draw: st.DrawFn) -> dict[str, Any]:
    """A call of one fixture tool that every check passes, with arguments that tool accepts."""
    tool = draw(st.sampled_from([t.name for t in TOOLS]))
    request: dict[str, Any] = {"tool": tool, "request_id": draw(st.one_of(st.integers(-(2**53), 2**53), _TEXT))}
    if tool == "test_mirror_header":
        value = draw(_TEXT)
        request |= {"arguments": {"value": value}, "extra_headers": {"mcp-param-value": value}}
    elif tool == "json_schema_2020_12_tool":
        way = draw(st.sampled_from(["phone", "email"]))
        request["arguments"] = {way: draw(_TEXT), "contactMethod": way, "name": draw(_TEXT)}
    else:
        request["arguments"] = draw(st.sampled_from([None, {}]))
    return request


_CHANGES: dict[str, Any] = {
    "unknown tool": {"tool": "test_nope"},
    "arguments the tool refuses": {"arguments": {"other": 1}},
    "arguments not an object": {"arguments": ["value"]},
    "no arguments": {"arguments": None},
    "Mcp-Name of another tool": {"header_name": "test_simple_text"},
    "Mcp-Param-Value that differs": {"extra_headers": {"mcp-param-value": "differs"}},
    "Mcp-Param-Value missing": {"extra_headers": {}},
    "Mcp-Param-Value not declared": {"extra_headers": {"mcp-param-other": "x"}},
    "no _meta": {"meta": None},
    "_meta of another version": {"meta": {**META, "io.modelcontextprotocol/protocolVersion": "2025-11-25"}},
    "_meta without capabilities": {"meta": {"io.modelcontextprotocol/protocolVersion": MODERN}},
    "_meta with client info": {"meta": {**META, "io.modelcontextprotocol/clientInfo": {"name": "p", "version": "1"}}},
    "_meta with bad client info": {"meta": {**META, "io.modelcontextprotocol/clientInfo": "nobody"}},
    "_meta with a progress token": {"meta": {**META, "progressToken": 5}},
    "Accept without SSE": {"accept": "application/json"},
    "Accept with weights": {"accept": "text/event-stream, application/json;q=0.9"},
    "Accept of anything": {"accept": "*/*"},
    "Content-Type not JSON": {"content_type": "text/plain"},
    "Content-Type with a charset": {"content_type": "application/json; charset=utf-8"},
}
"""What one change makes of a valid call (each replaces the keyword arguments of `call` it names)."""


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """A valid call, as is or with up to two changes (`_CHANGES`): most reach a check or an answer the
    SDK makes, and the valid ones are served."""
    request = draw(_valid())
    for change in draw(st.lists(st.sampled_from(sorted(_CHANGES)), max_size=2, unique=True)):
        request |= _CHANGES[change]
    return request


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=requests())
def test_the_direct_path_answers_every_request_exactly_as_the_sdk_does(pair: Pair, request: dict[str, Any]) -> None:
    """Valid reads and each of `_CHANGES` to them, alone and in pairs (invalid arguments, header mismatches,
    missing or conflicting envelopes, a wrong Accept or Content-Type, unknown tools): the same status,
    content type and bytes from both gateways."""
    with httpx.Client(timeout=10) as http:
        direct = http.post(pair.direct, **call(pair.token, **request))
        sdk = http.post(pair.sdk, **call(pair.token, **request))
    assert answer(direct) == answer(sdk)


def test_a_read_it_serves_never_reaches_the_sdk_and_reads_as_the_sdks(pair: Pair) -> None:
    """The read tools of the fixture, valid and refused: none reaches the SDK through the direct gateway,
    each reaches it through the other, and both answer alike (a result, a tool error, a refusal)."""
    calls = [
        {"tool": "test_simple_text"},
        {"tool": "test_error_handling", "arguments": {}},
        {"tool": "test_mirror_header", "arguments": {"value": "hi"}, "extra_headers": {"mcp-param-value": "hi"}},
        {"tool": "json_schema_2020_12_tool", "arguments": {"phone": "+41", "contactMethod": "phone"}},
        {"tool": "json_schema_2020_12_tool", "arguments": {"other": 1}},
    ]
    with httpx.Client(timeout=10) as http:
        before = pair.entries.count
        direct = [http.post(pair.direct, **call(pair.token, request_id=n, **c)) for n, c in enumerate(calls)]
        assert pair.entries.count == before
        sdk = [http.post(pair.sdk, **call(pair.token, request_id=n, **c)) for n, c in enumerate(calls)]
        assert pair.entries.count == before + len(calls)
    assert [answer(r) for r in direct] == [answer(r) for r in sdk]
    results = [r.json()["result"] for r in direct]
    assert [r["isError"] for r in results] == [False, True, False, False, True]
    assert results[0]["structuredContent"]["text"].startswith("This is a simple text")


def test_what_the_direct_path_leaves_to_the_sdk_reaches_it(pair: Pair) -> None:
    """An unknown tool, a body the checks refuse (its name differs from Mcp-Name, the Mcp-Param header
    disagrees), an Accept without SSE, and every other method reach the SDK through the direct gateway."""
    leaves = [
        call(pair.token, tool="test_nope"),
        call(pair.token, tool="test_simple_text", header_name="test_mirror_header"),
        call(pair.token, tool="test_mirror_header", arguments={"value": "a"}, extra_headers={"mcp-param-value": "b"}),
        call(pair.token, accept="application/json"),
    ]
    listing = call(pair.token)
    listing["content"] = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"_meta": META}})
    listing["headers"] = {**listing["headers"], "mcp-method": "tools/list"}
    del listing["headers"]["mcp-name"]
    with httpx.Client(timeout=10) as http:
        for request in [*leaves, listing]:
            before = pair.entries.count
            http.post(pair.direct, **request)
            assert pair.entries.count == before + 1, request["content"]


@pytest.mark.anyio
async def test_writes_card_tools_and_the_handshake_era_stay_with_the_sdk(redis: Redis, mcp_url: str) -> None:
    """Through the session gateway (direct calls on): a 2026-era read is served without the SDK, a
    proposal and a tool that changes cards are not (a proposal may answer as a task), and a handshake-era
    read goes through the SDK's session path, never the direct one."""
    entries = SdkEntries()
    token = await make_key(redis)
    with entries.counting():
        # (The client lists the tools before its first call, through the SDK: only calls are counted.)
        async with agent(mcp_url, token, mode=MODERN) as client:
            listed = await client.call_tool("rooms_list", {})
            assert (entries.calls, listed.is_error) == (0, False)
            booking = {"room_id": "room-eos", "date": "2031-01-06", "start": "09:00", "end": "10:00", "title": "Sync"}
            proposal = await client.call_tool("rooms_book", booking)
            card = payload(proposal)
            assert (entries.calls, card["status"]) == (1, "PENDING")
            mine = await client.call_tool("approvals_mine", {})  # a read of the caller's cards: served directly
            assert (entries.calls, mine.is_error) == (1, False)
            cancelled = await client.call_tool("approvals_cancel", {"card_id": card["card_id"]})
            assert (entries.calls, payload(cancelled)["status"]) == (2, "CANCELLED")
        modern = entries.count
        async with agent(mcp_url, token, mode=LEGACY) as client:  # initialize, initialized, tools/list, the call
            legacy = await client.call_tool("rooms_list", {})
        assert (
            legacy.is_error is False
            and entries.count > modern
            and entries.methods[modern:] == [""] * (entries.count - modern)
        )
