"""The MCP edge end to end: real uvicorn (httptools), real Redis, raw requests and the official client.

Malformed requests are written byte for byte (`tests.support.raw_http`), since no client library
sends them; the requests that must keep working go through the real MCP client in both eras.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.audit.events import AuditEvent
from gateway.mcp.edge import MAX_BODY_BYTES, HostPatterns, bad_id_or_batch, needs_parse
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from tests.support.agents import LEGACY, MODERN, agent, make_key, payload
from tests.support.examples import examples
from tests.support.raw_http import ACCEPT, JSON, RawAnswer, exchange
from tests.support.services import Backend, gateway_settings

pytestmark = pytest.mark.anyio

EXAMPLES = settings(
    max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
OWS = st.text(alphabet=" \t", max_size=3)
SUBJECT = "alice@acme.example"


def _casings(name: str) -> st.SearchStrategy[str]:
    return st.tuples(*(st.sampled_from(sorted({c.lower(), c.upper()})) for c in name)).map("".join)


def _modern(method: str, params: dict[str, Any], request_id: Any = 1) -> dict[str, Any]:
    meta = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_CAPABILITIES_META_KEY: {}}
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": meta}}


_CLIENT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
_INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": _CLIENT}


def _modern_lines(token: str, method: str, name: str | None = None) -> list[bytes]:
    lines = [f"Authorization: Bearer {token}".encode(), ACCEPT, JSON, f"MCP-Protocol-Version: {MODERN}".encode(),
             f"Mcp-Method: {method}".encode()]  # fmt: skip
    return lines if name is None else [*lines, f"Mcp-Name: {name}".encode()]


async def _session(mcp_url: str, token: str) -> str:
    """A 2025-11-25 session, initialized, opened by `token`."""
    headers = {"authorization": f"Bearer {token}", "accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(headers=headers) as http:
        opened = await http.post(mcp_url, json=_INITIALIZE)
        session = opened.headers["mcp-session-id"]
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        done = await http.post(mcp_url, json=initialized, headers={"mcp-session-id": session,
                                                                    "mcp-protocol-version": "2025-11-25"})  # fmt: skip
        assert done.status_code == 202
    return session


async def _rejects(redis: Redis) -> list[AuditEvent]:
    return [e for e in await RedisStreamAuditSink(redis).recent(500) if e.action == "mcp.reject"]


def _assert_refused(answer: RawAnswer, status: int, code: str, rpc_code: int = -32600) -> None:
    assert answer.status == status, answer
    assert answer.header("content-type") == "application/json"
    assert answer.header("mcp-session-id") is None
    body = answer.json()
    assert body["id"] is None and body["error"]["code"] == rpc_code
    assert body["error"]["data"]["code"] == code


# Duplicated headers


@EXAMPLES
@given(first=_casings("authorization"), second=_casings("authorization"), good_first=st.booleans(), ows=OWS)
async def test_two_authorization_lines_are_refused_without_authenticating_either(
    redis: Redis, mcp_url: str, first: str, second: str, good_first: bool, ows: str
) -> None:
    """Whichever line holds the live key, in any case and spacing, the answer is 400 and no session opens."""
    token = await make_key(redis)
    good, bad = f"{first}:{ows}Bearer {token}{ows}", f"{second}: Bearer csk_agent_made-up"
    lines = [line.encode() for line in ((good, bad) if good_first else (bad, good))]
    answer = await exchange(mcp_url, "POST", [*lines, ACCEPT, JSON], json.dumps(_INITIALIZE).encode())
    _assert_refused(answer, 400, "INVALID_REQUEST")
    assert "Authorization" in answer.json()["error"]["message"]
    [*_, event] = await _rejects(redis)
    assert (event.code, event.subject) == ("INVALID_REQUEST", "")  # audited, and nobody was authenticated


async def test_one_authorization_line_still_opens_a_session(redis: Redis, mcp_url: str) -> None:
    """The control: the same request with one line is served."""
    token = await make_key(redis)
    lines = [f"authorization: Bearer {token}".encode(), ACCEPT, JSON]
    answer = await exchange(mcp_url, "POST", lines, json.dumps(_INITIALIZE).encode())
    assert answer.status == 200 and answer.header("mcp-session-id")
    assert "result" in answer.sse_messages()[0]


@EXAMPLES
@given(
    first=_casings("mcp-protocol-version"),
    second=_casings("mcp-protocol-version"),
    versions=st.sampled_from([("2025-11-25", MODERN), (MODERN, "2025-11-25"), ("2025-11-25", "2025-11-25")]),
    ows=OWS,
)
async def test_two_protocol_version_lines_are_refused_in_either_order(
    redis: Redis, mcp_url: str, first: str, second: str, versions: tuple[str, str], ows: str
) -> None:
    """A request that names its era twice is 400 HeaderMismatch, before the SDK picks one of them."""
    token = await make_key(redis)
    lines = [f"Authorization: Bearer {token}".encode(), ACCEPT, JSON,
             f"{first}:{ows}{versions[0]}{ows}".encode(), f"{second}: {versions[1]}".encode()]  # fmt: skip
    answer = await exchange(mcp_url, "POST", lines, json.dumps(_INITIALIZE).encode())
    _assert_refused(answer, 400, "INVALID_REQUEST", rpc_code=-32020)
    [*_, event] = await _rejects(redis)
    assert "MCP-Protocol-Version" in event.reason


_ONCE = {  # every header a request carries once, with a value the gateway would accept on its own
    "host": lambda url: url.split("//", 1)[1].split("/", 1)[0],
    "origin": lambda url: "http://127.0.0.1",
    "mcp-session-id": lambda url: "a" * 32,
    "mcp-method": lambda url: "tools/list",
    "mcp-name": lambda url: "rooms_availability",
}


@EXAMPLES
@given(header=st.sampled_from(sorted(_ONCE)), data=st.data(), ows=OWS)
async def test_a_second_line_of_any_single_line_header_is_refused_before_anything_reads_it(
    redis: Redis, mcp_url: str, header: str, data: st.DataObject, ows: str
) -> None:
    """The class, not one spelling: whatever the header, its casing and spacing, two lines are 400 (a
    header mismatch for the routing headers) and nobody is authenticated; the answer names the header."""
    token = await make_key(redis)
    value = _ONCE[header](mcp_url)
    first, second = data.draw(_casings(header)), data.draw(_casings(header))
    extra = [f"{first}:{ows}{value}{ows}".encode(), f"{second}: {value}".encode()]
    if header == "host":
        extra = extra[1:]  # `exchange` writes the first Host line itself
    lines = [f"Authorization: Bearer {token}".encode(), ACCEPT, JSON, f"MCP-Protocol-Version: {MODERN}".encode(),
             *extra]  # fmt: skip
    answer = await exchange(mcp_url, "POST", lines, json.dumps(_modern("tools/list", {})).encode())
    routing = header in {"mcp-method", "mcp-name"}
    _assert_refused(answer, 400, "INVALID_REQUEST", rpc_code=-32020 if routing else -32600)
    assert header in answer.json()["error"]["message"].lower()
    [*_, event] = await _rejects(redis)
    assert (event.code, event.subject) == ("INVALID_REQUEST", "")


async def test_an_anonymous_duplicate_is_refused_but_not_audited(redis: Redis, mcp_url: str) -> None:
    """No credential, no audit entry: a flood without keys cannot fill the audit stream through the edge."""
    lines = [ACCEPT, JSON, b"MCP-Protocol-Version: 2025-11-25", b"mcp-protocol-version: 2025-11-25"]
    answer = await exchange(mcp_url, "POST", lines, json.dumps(_INITIALIZE).encode())
    _assert_refused(answer, 400, "INVALID_REQUEST", rpc_code=-32020)
    assert await _rejects(redis) == []


# Whitespace around the 2026-07-28 routing headers


@EXAMPLES
@given(before=OWS, after=OWS, name_before=OWS, name_after=OWS)
async def test_whitespace_around_mcp_method_and_mcp_name_is_not_part_of_the_value(
    redis: Redis, mcp_url: str, before: str, after: str, name_before: str, name_after: str
) -> None:
    """``Mcp-Method: tools/call\\t`` and ``Mcp-Name:  rooms_list `` match the body (httptools keeps the tail)."""
    token = await make_key(redis)
    lines = _modern_lines(token, f"{before}tools/call{after}", f"{name_before}rooms_list{name_after}")
    body = _modern("tools/call", {"name": "rooms_list", "arguments": {}})
    answer = await exchange(mcp_url, "POST", lines, json.dumps(body).encode())
    assert answer.status == 200, answer
    [message] = [m for m in answer.sse_messages() if "id" in m]
    assert message["result"]["isError"] is False


async def test_a_routing_header_that_differs_from_the_body_is_still_a_mismatch(redis: Redis, mcp_url: str) -> None:
    """Trimming only drops whitespace: another name, or another case, is refused by the SDK as before."""
    token = await make_key(redis)
    body = json.dumps(_modern("tools/call", {"name": "rooms_list", "arguments": {}})).encode()
    for name in ("rooms_lis", "ROOMS_LIST", "rooms list"):
        answer = await exchange(mcp_url, "POST", _modern_lines(token, "tools/call", name), body)
        assert answer.status == 400 and answer.json()["error"]["code"] == -32020, name


# JSON-RPC ids and batches

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
BAD_IDS = JSON_VALUES.filter(lambda v: isinstance(v, bool) or not isinstance(v, str | int))


OTHER_MEMBERS = st.dictionaries(st.sampled_from(["jsonrpc", "method", "params", "x", "ids", "_id"]), JSON_VALUES,
                                max_size=4)  # fmt: skip


@st.composite
def _written(draw: st.DrawFn, request_id: Any) -> bytes:
    """A JSON object with `request_id` as its top-level ``id``, written in any of the ways JSON allows."""
    members = list(draw(OTHER_MEMBERS).items())
    members.insert(draw(st.integers(0, len(members))), ("id", request_id))
    item, key = draw(st.sampled_from([",", ", ", ",\n  "])), draw(st.sampled_from([":", ": ", " :\t", "\r\n:"]))
    text = json.dumps(dict(members), separators=(item, key), ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()):
        text = text.replace('"id"', '"\\u0069d"', 1)  # the same member name, escaped
    return (draw(OWS) + text).encode()


@settings(max_examples=examples(500), deadline=None)
@given(data=st.data(), request_id=BAD_IDS)
def test_the_scan_sends_every_bad_top_level_id_to_the_parser(data: st.DataObject, request_id: Any) -> None:
    """The byte scan may send a good body to the parser, never wave a bad one through."""
    body = data.draw(_written(request_id))
    assert needs_parse(body)
    assert bad_id_or_batch(body) is not None


@settings(max_examples=examples(500), deadline=None)
@given(data=st.data(), request_id=st.text(max_size=8) | st.integers())
def test_a_string_or_integer_id_is_never_refused(data: st.DataObject, request_id: Any) -> None:
    """Whatever else the body holds (nested ids of any type included), a good top-level id passes."""
    assert bad_id_or_batch(data.draw(_written(request_id))) is None


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(_modern("tools/call", {"name": "rooms_availability",
                                          "arguments": {"room_id": "room-atlas", "date": "2026-12-01"}})),
        json.dumps({"jsonrpc": "2.0", "id": "req-7", "method": "tools/list"}, separators=(",", ":")),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ],
)  # fmt: skip
def test_what_clients_send_is_not_parsed_at_the_edge(body: str) -> None:
    """The hot path: requests with plain ids and notifications pass the scan without a JSON parse."""
    assert not needs_parse(body.encode())


@EXAMPLES
@given(request_id=BAD_IDS, era=st.sampled_from([LEGACY, MODERN]))
async def test_a_request_whose_id_is_not_a_string_or_integer_is_refused_never_accepted(
    redis: Redis, mcp_url: str, request_id: Any, era: str
) -> None:
    """Null, booleans, fractions, objects, arrays: 400 Invalid Request with id null, in both eras, audited."""
    token = await make_key(redis, subject=SUBJECT)
    if era == LEGACY:
        session = await _session(mcp_url, token)
        lines = [f"Authorization: Bearer {token}".encode(), ACCEPT, JSON, f"Mcp-Session-Id: {session}".encode(),
                 b"MCP-Protocol-Version: 2025-11-25"]  # fmt: skip
        body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}
    else:
        lines = _modern_lines(token, "tools/list")
        body = _modern("tools/list", {}, request_id)
    answer = await exchange(mcp_url, "POST", lines, json.dumps(body).encode())
    _assert_refused(answer, 400, "INVALID_REQUEST")
    [*_, event] = await _rejects(redis)
    assert (event.code, event.subject) == ("INVALID_REQUEST", SUBJECT)


@pytest.mark.parametrize("era", [LEGACY, MODERN])
async def test_a_batch_is_refused_as_an_invalid_request(redis: Redis, mcp_url: str, era: str) -> None:
    """Neither era the gateway serves accepts batches; a batch of valid requests is 400 Invalid Request."""
    token = await make_key(redis)
    if era == LEGACY:
        session = await _session(mcp_url, token)
        lines = [f"Authorization: Bearer {token}".encode(), ACCEPT, JSON, f"Mcp-Session-Id: {session}".encode()]
        batch = [{"jsonrpc": "2.0", "id": n, "method": "tools/list"} for n in (1, 2)]
    else:
        lines = _modern_lines(token, "tools/list")
        batch = [_modern("tools/list", {}, n) for n in (1, 2)]
    answer = await exchange(mcp_url, "POST", lines, json.dumps(batch).encode())
    _assert_refused(answer, 400, "INVALID_REQUEST")


async def test_a_message_with_both_result_and_error_is_refused_not_accepted(redis: Redis, mcp_url: str) -> None:
    """JSON-RPC 2.0: a response holds exactly one of result and error. One with both is 400 Invalid Request,
    audited, where the handshake-era SDK took it as a response and answered 202."""
    token = await make_key(redis, subject=SUBJECT)
    session = await _session(mcp_url, token)
    lines = [f"Authorization: Bearer {token}".encode(), ACCEPT, JSON, f"Mcp-Session-Id: {session}".encode(),
             b"MCP-Protocol-Version: 2025-11-25"]  # fmt: skip
    body = {"jsonrpc": "2.0", "id": 5, "result": {}, "error": {"code": -32000, "message": "both"}}
    answer = await exchange(mcp_url, "POST", lines, json.dumps(body).encode())
    _assert_refused(answer, 400, "INVALID_REQUEST")
    [*_, event] = await _rejects(redis)
    assert (event.code, event.subject) == ("INVALID_REQUEST", SUBJECT) and "result and error" in event.reason


async def test_a_second_request_with_the_id_of_one_still_in_flight_in_the_session_is_refused(
    redis: Redis, mcp_url: str, clean_backends: dict[str, Backend]
) -> None:
    """Two requests with id 7 in one 2025-11-25 session: while the first (a read the backend holds) is being
    answered, the second is 400 Invalid Request and audited; the first gets its own answer, and once it has,
    id 7 may be used again. Before, the two got each other's answers and one never ended."""
    token = await make_key(redis, subject=SUBJECT)
    session = await _session(mcp_url, token)
    headers = {"authorization": f"Bearer {token}", "accept": "application/json, text/event-stream",
               "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}  # fmt: skip
    rooms = clean_backends["rooms"]
    before = len(rooms.app.state.service.requests)
    rooms.set_faults(latency_ms=400, paths=["/rooms"], times=1)
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "rooms_list", "arguments": {}}}
    listing = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
    async with httpx.AsyncClient(headers=headers, timeout=10) as http, anyio.create_task_group() as group:
        answers: dict[str, httpx.Response] = {}

        async def first() -> None:
            answers["first"] = await http.post(mcp_url, json=call)

        group.start_soon(first)
        with anyio.fail_after(5):
            while not [r for r in list(rooms.app.state.service.requests)[before:] if r.path == "/rooms"]:
                await anyio.sleep(0.01)  # until the read is at the backend, held there
        second = await http.post(mcp_url, json=listing)
    assert second.status_code == 400 and second.json()["error"]["data"]["code"] == "INVALID_REQUEST"
    [*_, event] = await _rejects(redis)
    assert (event.code, event.subject) == ("INVALID_REQUEST", SUBJECT) and "still being answered" in event.reason
    answered = _sse_or_json(answers["first"])
    assert answered["id"] == 7, answered
    assert "rooms" in answered["result"]["structuredContent"], answered  # its own answer: a tools/call result
    async with httpx.AsyncClient(headers=headers, timeout=10) as http:
        again = _sse_or_json(await http.post(mcp_url, json=listing))
    assert again["id"] == 7 and again["result"]["tools"]


def _sse_or_json(answer: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of a 2025-11-25 answer, sent as JSON or as one SSE event."""
    assert answer.status_code == 200, answer.text
    if answer.headers["content-type"].startswith("application/json"):
        return dict(answer.json())
    [data] = [line.removeprefix("data:").strip() for line in answer.text.splitlines() if line.startswith("data:")]
    return dict(json.loads(data))


# Sessions


@pytest.mark.parametrize("method", ["POST", "GET", "DELETE"])
async def test_a_request_without_a_session_is_refused_without_handing_out_one(
    redis: Redis, mcp_url: str, method: str
) -> None:
    """The SDK opened a session for the request, refused it, and discarded the session: its id stays home."""
    token = await make_key(redis, subject=SUBJECT)
    lines = [f"Authorization: Bearer {token}".encode(), ACCEPT, JSON]
    body = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).encode() if method == "POST" else b""
    answer = await exchange(mcp_url, method, lines, body)
    assert answer.status == 400 and answer.header("mcp-session-id") is None
    assert answer.json()["error"]["code"] == -32600
    [*_, event] = await _rejects(redis)
    assert (event.code, event.subject) == ("INVALID_REQUEST", SUBJECT)


async def test_an_unknown_session_is_404_without_a_session_id_and_audited(redis: Redis, mcp_url: str) -> None:
    token = await make_key(redis, subject=SUBJECT)
    lines = [f"Authorization: Bearer {token}".encode(), ACCEPT, JSON, b"Mcp-Session-Id: 0123456789abcdef"]
    answer = await exchange(mcp_url, "POST", lines, json.dumps({"jsonrpc": "2.0", "id": 2, "method": "x"}).encode())
    assert answer.status == 404 and answer.header("mcp-session-id") is None
    [*_, event] = await _rejects(redis)
    assert (event.code, event.subject) == ("NOT_FOUND", SUBJECT)


# The body cap


@pytest.mark.parametrize("chunked", [False, True])
async def test_a_body_over_the_cap_is_413_before_it_is_parsed(redis: Redis, mcp_url: str, chunked: bool) -> None:
    """Declared or streamed, a body past `MAX_BODY_BYTES` (well under the SDK's 4 MiB) is refused and audited."""
    token = await make_key(redis, subject=SUBJECT)
    oversized = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"pad":"' + b"x" * MAX_BODY_BYTES + b'"}}'
    headers = {"authorization": f"Bearer {token}", "accept": "application/json, text/event-stream",
               "content-type": "application/json"}  # fmt: skip

    async def stream() -> Any:
        for start in range(0, len(oversized), 65_536):
            yield oversized[start : start + 65_536]

    async with httpx.AsyncClient() as http:
        response = await http.post(mcp_url, content=stream() if chunked else oversized, headers=headers)
    assert response.status_code == 413
    assert response.json()["error"]["data"]["code"] == "PAYLOAD_TOO_LARGE"
    [*_, event] = await _rejects(redis)
    assert (event.code, event.subject) == ("PAYLOAD_TOO_LARGE", SUBJECT)


async def test_a_declared_length_over_the_cap_is_refused_without_waiting_for_the_body(
    redis: Redis, mcp_url: str
) -> None:
    """Content-Length alone decides: the body it announces is never awaited (it is never sent here)."""
    token = await make_key(redis)
    lines = [f"Authorization: Bearer {token}".encode(), ACCEPT, JSON, f"Content-Length: {4 * MAX_BODY_BYTES}".encode()]
    answer = await exchange(mcp_url, "POST", lines, b'{"jsonrpc":')
    assert answer.status == 413 and answer.json()["error"]["data"]["code"] == "PAYLOAD_TOO_LARGE"


async def test_a_body_under_the_cap_reaches_the_sdk(redis: Redis, mcp_url: str) -> None:
    """Just under the cap, a modern tools/call with a large argument is answered by the tool path."""
    token = await make_key(redis)
    pad = "x" * (MAX_BODY_BYTES - 400)
    body = json.dumps(_modern("tools/call", {"name": "rooms_list", "arguments": {"pad": pad}})).encode()
    assert len(body) <= MAX_BODY_BYTES
    answer = await exchange(mcp_url, "POST", _modern_lines(token, "tools/call", "rooms_list"), body)
    assert answer.status == 200
    [message] = [m for m in answer.sse_messages() if "id" in m]
    assert message["result"]["isError"] is True  # the executor refused the unknown argument, as data


# What must keep working


@pytest.mark.parametrize("mode", [LEGACY, MODERN])
async def test_the_official_client_lists_and_calls_through_the_edge(redis: Redis, mcp_url: str, mode: str) -> None:
    """Both eras, a whole session (the legacy client ends it with DELETE) and no edge refusal on the way."""
    token = await make_key(redis)
    async with agent(mcp_url, token, mode) as client:
        assert "rooms_list" in {tool.name for tool in (await client.list_tools()).tools}
        result = await client.call_tool("rooms_availability", {"room_id": "room-atlas", "date": "2026-12-01"})
    assert not result.is_error and payload(result)["taken"]
    assert await _rejects(redis) == []


@pytest.fixture(scope="module")
def stateless_url(redis_url: str, backends: dict[str, Backend]) -> Iterator[str]:
    """A gateway serving the handshake era without sessions (``mcp_stateless``)."""
    settings = replace(gateway_settings(redis_url, backends), mcp_stateless=True, run_worker=False)
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        yield f"{base}/mcp"


async def test_the_stateless_handshake_era_refuses_a_null_id_and_serves_the_client(
    redis: Redis, stateless_url: str
) -> None:
    """Without sessions the SDK's legacy path accepted a null id as a notification too; now it is 400."""
    token = await make_key(redis)
    lines = [f"Authorization: Bearer {token}".encode(), ACCEPT, JSON, b"MCP-Protocol-Version: 2025-11-25"]
    answer = await exchange(stateless_url, "POST", lines, b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}')
    _assert_refused(answer, 400, "INVALID_REQUEST")
    async with agent(stateless_url, token, LEGACY) as client:
        assert not (await client.call_tool("rooms_list", {})).is_error


# Foreign sites (DNS rebinding)

LOOPBACK = ["127.0.0.1:*", "localhost:*", "[::1]:*"]


async def _post_initialize(mcp_url: str, token: str | None, **headers: str) -> httpx.Response:
    sent = {"accept": "application/json, text/event-stream", **headers}
    if token is not None:
        sent["authorization"] = f"Bearer {token}"
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.post(mcp_url, json=_INITIALIZE, headers=sent)


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [({"host": "rebound.example"}, 421, "INVALID_REQUEST"), ({"origin": "http://rebound.example"}, 403,
                                                             "PERMISSION_DENIED")],
)  # fmt: skip
async def test_a_foreign_host_or_origin_is_refused_with_a_stable_code_and_audited(
    redis: Redis, mcp_url: str, headers: dict[str, str], status: int, code: str
) -> None:
    """The refusal is JSON with its code, names nobody (no key was resolved), and is on the audit trail."""
    answer = await _post_initialize(mcp_url, await make_key(redis), **headers)
    assert answer.status_code == status and answer.headers["content-type"] == "application/json"
    assert answer.headers.get("mcp-session-id") is None
    assert answer.json()["error"]["data"]["code"] == code
    [*_, event] = await _rejects(redis)
    assert (event.code, event.subject) == (code, "")


async def test_a_foreign_host_is_refused_before_any_key_lookup(redis: Redis, mcp_url: str) -> None:
    """A made-up key with a foreign Host is 421, not the 401 a key lookup would give, and anonymous is unaudited."""
    before = len(await _rejects(redis))
    made_up = await _post_initialize(mcp_url, "csk_agent_made-up", host="rebound.example")
    anonymous = await _post_initialize(mcp_url, None, host="rebound.example")
    assert (made_up.status_code, anonymous.status_code) == (421, 421)
    assert len(await _rejects(redis)) == before + 1  # the request that presented a credential only


def test_host_patterns_admit_exactly_the_named_hosts_and_any_numeric_port_of_a_wildcard() -> None:
    patterns = HostPatterns([*LOOPBACK, "gateway.example"])
    for admitted in (b"127.0.0.1:8765", b"localhost:1", b"[::1]:65535", b"gateway.example"):
        assert patterns.admits(admitted)
    for refused in (b"127.0.0.1", b"127.0.0.1:", b"127.0.0.1:80x", b"127.0.0.1.evil.example:80",
                    b"gateway.example:443", b"localhost:80@evil.example", b""):  # fmt: skip
        assert not patterns.admits(refused)


@settings(max_examples=examples(300), deadline=None)
@given(host=st.binary(max_size=40))
def test_host_patterns_never_admit_a_value_outside_the_patterns(host: bytes) -> None:
    """Whatever a client sends, admitted means exactly "a named host, or a wildcard's base and digits"."""
    admitted = HostPatterns(LOOPBACK).admits(host)
    bases = (b"127.0.0.1:", b"localhost:", b"[::1]:")
    expected = any(host.startswith(b) and host[len(b) :].isdigit() for b in bases)
    assert admitted == expected
