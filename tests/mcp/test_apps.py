"""MCP Apps views over the real MCP client and a real gateway: what a view opens, and what nobody else can.

The stranger's booking title that ``rooms_availability`` withholds from the model reaches the person
through a single-use handle; the model-visible result and every ``tools/list`` hold neither the title
nor an app-only tool; a handle replayed, or presented by another principal or by a client without the
extension, opens nothing and is audited.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY, CallToolResult
from redis.asyncio import Redis

from backends.demo_data import HOSTILE_TITLE
from backends.serve import serve_app_in_thread
from gateway.audit.events import AuditEvent
from gateway.executor.views import APP_TOOLS, CARD_TOOL, HANDLE_REFUSED, READ_TOOL
from gateway.mcp.apps import CARD_VIEW, READ_VIEW, VIEW_META, VIEW_MIME
from gateway.notifications.message import NotificationSettings
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from tests.support.agents import LEGACY, MODERN, agent, error_code, everything_the_model_sees, make_key, payload
from tests.support.services import Backend, gateway_settings
from tests.support.views import view_host

pytestmark = pytest.mark.anyio

DAY = {"room_id": "room-atlas", "date": "2026-12-01"}
HANDSHAKE = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


def _model_visible(result: CallToolResult) -> str:
    """What a host hands the model: the result without its ``_meta`` (which only the view reads)."""
    return result.model_copy(update={"meta": None}).model_dump_json(by_alias=True)


async def _read(client: Client) -> tuple[CallToolResult, str]:
    result = await client.call_tool("rooms_availability", DAY)
    assert result.is_error is False
    return result, str((result.meta or {})[VIEW_META]["handle"])


async def _events(redis: Redis, tool: str) -> list[AuditEvent]:
    return [event for event in await RedisStreamAuditSink(redis).recent(200) if event.tool == tool]


@pytest.mark.parametrize("era", [MODERN, LEGACY])
async def test_a_read_view_opens_the_withheld_title_once_while_the_model_sees_neither_it_nor_the_app_tools(
    redis: Redis, mcp_url: str, era: str
) -> None:
    """A client that renders views sees the read view named and the app-only tools marked for views alone, so its
    model's list has none; the model-visible result has no title; the handle in ``_meta`` opens the title once,
    marked untrusted; a replay is refused."""
    token = await make_key(redis, roles=("staff",))
    async with view_host(mcp_url, token, era) as host:
        listed = (await host.list_tools()).tools
        result, handle = await _read(host)
        opened = await host.call_tool(READ_TOOL, {"handle": handle})
        replayed = await host.call_tool(READ_TOOL, {"handle": handle})

    # What the host hands its model: every tool but those whose visibility is the views' alone.
    for_model = [tool for tool in listed if (tool.meta or {}).get("ui", {}).get("visibility") != ["app"]]
    assert {tool.name for tool in listed} - {tool.name for tool in for_model} == APP_TOOLS
    assert {tool.name for tool in for_model}.isdisjoint(APP_TOOLS)
    views = {tool.name: (tool.meta or {}).get("ui", {}).get("resourceUri") for tool in for_model}
    assert views["rooms_availability"] == READ_VIEW and views["rooms_book"] == CARD_VIEW
    assert views["rooms_list"] is None  # nothing withheld from the model: nothing to show apart
    model_visible = _model_visible(result)
    assert HOSTILE_TITLE not in model_visible and handle not in model_visible
    assert HOSTILE_TITLE not in "".join(tool.model_dump_json() for tool in listed)

    shown = payload(opened)
    assert shown["tool"] == "rooms_availability" and shown["untrusted"] is True
    assert HOSTILE_TITLE in shown["text"]
    assert error_code(replayed) == "NOT_FOUND"
    assert payload(replayed)["error"]["message"] == HANDLE_REFUSED
    [minted] = [e for e in await _events(redis, "rooms_availability") if e.action == "view.open"]
    ok, refused = await _events(redis, READ_TOOL)
    assert (ok.outcome, refused.outcome, refused.code) == ("ok", "deny", "NOT_FOUND")
    assert refused.reason == "the handle was opened already"
    assert minted.extra["handle"] == ok.extra["handle"] == refused.extra["handle"]
    assert handle not in str(await RedisStreamAuditSink(redis).recent(200))  # the trail keeps a fingerprint


async def test_another_principals_handle_opens_nothing_and_is_not_spent_by_the_attempt(
    redis: Redis, mcp_url: str
) -> None:
    """Bob presenting Alice's handle is refused and audited; Alice's handle still opens for her after."""
    alice = await make_key(redis, roles=("staff",))
    bob = await make_key(redis, roles=("staff",), subject="bob@acme.example")
    async with view_host(mcp_url, alice, MODERN) as host:
        _result, handle = await _read(host)
        async with view_host(mcp_url, bob, MODERN) as stranger:
            taken = await stranger.call_tool(READ_TOOL, {"handle": handle})
        mine = await host.call_tool(READ_TOOL, {"handle": handle})

    assert error_code(taken) == "NOT_FOUND"
    assert HOSTILE_TITLE in payload(mine)["text"]
    refused, _ok = await _events(redis, READ_TOOL)
    assert (refused.subject, refused.code) == ("bob@acme.example", "NOT_FOUND")
    assert refused.reason == "the handle was minted for another principal's call"


async def test_the_same_persons_other_key_cannot_open_a_handle_either(redis: Redis, mcp_url: str) -> None:
    """A handle is bound to the key that made the call, not only to its person."""
    first = await make_key(redis, roles=("staff",))
    second = await make_key(redis, roles=("staff",))
    async with view_host(mcp_url, first, MODERN) as host:
        _result, handle = await _read(host)
    async with view_host(mcp_url, second, MODERN) as other:
        assert error_code(await other.call_tool(READ_TOOL, {"handle": handle})) == "NOT_FOUND"


@pytest.mark.parametrize("era", [MODERN, LEGACY])
async def test_a_client_without_the_extension_is_refused_an_app_tool_as_an_unknown_tool_and_audited(
    redis: Redis, mcp_url: str, era: str
) -> None:
    """Even with a valid handle of its own principal, a client that did not declare views reads PERMISSION_DENIED,
    exactly as for a name that does not exist; the refusal is audited, and the handle is not spent."""
    token = await make_key(redis, roles=("staff",))
    async with view_host(mcp_url, token, era) as host:
        _result, handle = await _read(host)
        async with agent(mcp_url, token, era) as plain:
            listed = {tool.name for tool in (await plain.list_tools()).tools}
            refused = await plain.call_tool(READ_TOOL, {"handle": handle})
            unknown = await plain.call_tool("no_such_tool", {"handle": handle})
            card = await plain.call_tool(CARD_TOOL, {"card_id": "crd_x"})
        opened = await host.call_tool(READ_TOOL, {"handle": handle})

    assert listed.isdisjoint(APP_TOOLS)  # this listing is the model's
    assert everything_the_model_sees(refused) == everything_the_model_sees(unknown)
    assert error_code(card) == "PERMISSION_DENIED"
    assert HOSTILE_TITLE in payload(opened)["text"]
    denied = [e for e in await _events(redis, READ_TOOL) if e.outcome == "deny"]
    assert [(e.code, e.reason) for e in denied] == [
        ("PERMISSION_DENIED", "app-only tool called by a client without MCP Apps views")
    ]


async def test_a_client_declaring_the_extension_without_the_html_profile_gets_no_views(
    redis: Redis, mcp_url: str
) -> None:
    """Views are HTML: a client whose ``mimeTypes`` lacks ``text/html;profile=mcp-app`` renders none."""
    from mcp.client import ClientExtension

    class NoHtml(ClientExtension):
        identifier = "io.modelcontextprotocol/ui"

        def settings(self) -> dict[str, Any]:
            return {"mimeTypes": ["text/plain"]}

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    token = await make_key(redis, roles=("staff",))
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=10) as http:
        transport = streamable_http_client(mcp_url, http_client=http)
        async with Client(transport, mode=MODERN, extensions=[NoHtml()]) as client:  # type: ignore[arg-type]
            listed = (await client.list_tools()).tools
            result = await client.call_tool("rooms_availability", DAY)
    assert all(tool.meta is None or "ui" not in tool.meta for tool in listed)
    assert {tool.name for tool in listed}.isdisjoint(APP_TOOLS)
    assert result.meta is None or VIEW_META not in result.meta


@pytest.mark.parametrize("era", [MODERN, LEGACY])
async def test_the_views_are_served_as_ui_resources_with_no_network_and_a_strict_policy(
    redis: Redis, mcp_url: str, era: str
) -> None:
    """Each view is one HTML document of the MCP Apps profile, declaring no domain for the host to open."""
    token = await make_key(redis, roles=("staff",))
    async with view_host(mcp_url, token, era) as host:
        for uri in (READ_VIEW, CARD_VIEW):
            [content] = (await host.read_resource(uri)).contents
            assert content.mime_type == VIEW_MIME
            assert content.meta == {
                "ui": {
                    "csp": {"connectDomains": [], "resourceDomains": [], "frameDomains": [], "baseUriDomains": []},
                    "prefersBorder": True,
                }
            }
            text = content.text  # type: ignore[union-attr]
            assert "connect-src 'none'" in text and "default-src 'none'" in text
            assert "unsafe-inline" not in text and "unsafe-eval" not in text
            assert "innerHTML" not in text and "http://" not in text and "https://" not in text


@pytest.fixture(scope="module")
def viewless_url(redis_url: str, backends: dict[str, Backend], expenses: Backend) -> Iterator[str]:
    """The same gateway as `mcp_url` (same store, same backends), built to serve no MCP Apps view."""
    app = create_app(gateway_settings(redis_url, backends, expenses=expenses), views=False)
    with serve_app_in_thread(app, lifespan=True) as base:
        yield f"{base}/mcp"


def _bodies(answer: httpx.Response) -> list[bytes]:
    """Each JSON-RPC message of an answer, as the bytes it was sent in (a JSON body, or SSE ``data:`` lines)."""
    assert answer.status_code == 200, answer.text
    if answer.headers["content-type"].startswith("application/json"):
        return [answer.content]
    return [line[len(b"data: ") :] for line in answer.content.splitlines() if line.startswith(b"data: {")]


def _requests() -> list[tuple[str, dict[str, Any]]]:
    """What a client asks, in order: the listing, a read with withheld text, an app-only tool, a write proposed
    twice (the second answer, the open card, is what the comparison reads: the first one makes the card)."""
    booking = {"room_id": "room-eos", "date": "2027-05-03", "start": "10:00", "end": "10:30", "title": "Same bytes"}
    return [
        ("tools/list", {}),
        ("tools/call", {"name": "rooms_availability", "arguments": DAY}),
        ("tools/call", {"name": READ_TOOL, "arguments": {"handle": "x" * 43}}),
        ("tools/call", {"name": CARD_TOOL, "arguments": {"card_id": "crd_x"}}),
        ("tools/call", {"name": "rooms_book", "arguments": booking}),
    ]


async def _modern_exchange(mcp_url: str, token: str) -> list[bytes]:
    meta = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_CAPABILITIES_META_KEY: {}}
    answers: list[bytes] = []
    async with httpx.AsyncClient(timeout=10) as http:
        for number, (method, params) in enumerate([("server/discover", {}), *_requests()], start=1):
            headers = {"authorization": f"Bearer {token}", "accept": ACCEPT, "mcp-protocol-version": MODERN,
                       "mcp-method": method}  # fmt: skip
            if "name" in params:
                headers["mcp-name"] = params["name"]
            message = {"jsonrpc": "2.0", "id": number, "method": method, "params": {**params, "_meta": meta}}
            answers += _bodies(await http.post(mcp_url, json=message, headers=headers))
    return answers


async def _handshake_exchange(mcp_url: str, token: str) -> list[bytes]:
    hello = {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
    async with httpx.AsyncClient(headers={"authorization": f"Bearer {token}", "accept": ACCEPT}, timeout=10) as http:
        opened = await http.post(mcp_url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
        answers = _bodies(opened)
        session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": HANDSHAKE}
        await http.post(mcp_url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        for number, (method, params) in enumerate(_requests(), start=1):
            message = {"jsonrpc": "2.0", "id": number, "method": method, "params": params}
            answers += _bodies(await http.post(mcp_url, json=message, headers=session))
        await http.delete(mcp_url, headers=session)
    return answers


@pytest.mark.parametrize("era", [MODERN, LEGACY])
async def test_a_client_without_the_extension_gets_the_very_bytes_a_gateway_without_views_sends(
    redis: Redis, mcp_url: str, viewless_url: str, era: str
) -> None:
    """The same exchange, raw, against the gateway and against one built without views: server/discover
    (2026-07-28) or initialize (2025-11-25), tools/list, a read whose text is withheld, both app-only names
    and a write's open card are equal byte for byte."""
    token = await make_key(redis, roles=("staff",))
    exchange = _modern_exchange if era == MODERN else _handshake_exchange
    await exchange(viewless_url, token)  # files the card; from here on every answer is the open card's
    without_views = await exchange(viewless_url, token)
    with_views = await exchange(mcp_url, token)
    assert len(with_views) == len(_requests()) + 1  # and server/discover (2026-07-28) or initialize (2025-11-25)
    assert with_views == without_views
    assert b"countersign_view" not in with_views[1]  # the listing
    assert all(b'"result"' in answer for answer in with_views)  # answers, not errors that match


async def test_a_write_names_its_card_for_the_card_view_which_follows_the_callers_own_card(
    redis: Redis, mcp_url: str
) -> None:
    """A proposal's result carries its card id in ``_meta``; the card view's tool answers that card with the link
    to it in the console at the configured address (``[notifications] console_url``, never the Host the client
    reached /mcp by), and answers another principal NOT_FOUND."""
    token = await make_key(redis, roles=("staff",))
    booking = {"room_id": "room-eos", "date": "2027-11-21", "start": "11:00", "end": "11:30", "title": "Card view"}
    async with view_host(mcp_url, token, MODERN) as host:
        proposed = await host.call_tool("rooms_book", booking)
        card_id = payload(proposed)["card_id"]
        assert (proposed.meta or {})[VIEW_META] == {"card_id": card_id}
        shown = payload(await host.call_tool(CARD_TOOL, {"card_id": card_id}))
    other = await make_key(redis, roles=("staff",), subject="bob@acme.example")
    async with view_host(mcp_url, other, MODERN) as stranger:
        refused = await stranger.call_tool(CARD_TOOL, {"card_id": card_id})

    assert (shown["card_id"], shown["status"], shown["final"]) == (card_id, "PENDING", False)
    assert shown["console"] == f"{NotificationSettings().console_url}/admin/#/cards/{card_id}"
    assert not shown["console"].startswith(mcp_url.removesuffix("mcp"))
    assert shown["preview"] and "note" not in shown
    assert error_code(refused) == "NOT_FOUND"
