"""What the composed gateway answers around ``/mcp`` that is not the MCP edge's own answer.

The exact path goes to the edge in any method the endpoint serves (HEAD included); every other
method, the trailing-slash spelling and a websocket get Starlette's answers; an exception escaping
the edge becomes Starlette's plain 500 and still reaches the server, which logs it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.datastructures import Secret
from starlette.routing import Route

from gateway.config.settings import Settings
from gateway.mcp.edge import HostPatterns
from gateway.runtime.app import create_app
from gateway.web.root_app import GatewayApp
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio

LOOPBACK = "http://127.0.0.1:8000"


@pytest.fixture
async def app(redis_url: str) -> AsyncIterator[Any]:
    built = create_app(Settings(redis_url=redis_url, adapters={}, audit_secret=Secret(TEST_AUDIT_SECRET)), tools=[])
    try:
        yield built
    finally:
        await built.state.gateway.aclose()


def _client(app: Any, *, raise_app_exceptions: bool = True) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=raise_app_exceptions)
    return httpx.AsyncClient(transport=transport, base_url=LOOPBACK)


@pytest.mark.parametrize("method", ["PUT", "PATCH", "OPTIONS"])
async def test_a_method_the_endpoint_does_not_serve_is_405_naming_the_ones_it_does(app: Any, method: str) -> None:
    """Starlette's answer, as before: plain text, and ``Allow`` lists the endpoint's methods."""
    async with _client(app) as http:
        answer = await http.request(method, "/mcp")
    assert answer.status_code == 405
    assert answer.text == "Method Not Allowed"
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"
    assert sorted(answer.headers["allow"].split(", ")) == ["DELETE", "GET", "HEAD", "POST"]


async def test_a_trailing_slash_is_redirected_to_the_endpoint(app: Any) -> None:
    """``/mcp/`` is not the endpoint: Starlette redirects it (307 keeps the method and the body)."""
    async with _client(app) as http:
        answer = await http.post("/mcp/", content=b"{}")
    assert answer.status_code == 307
    assert answer.headers["location"] == f"{LOOPBACK}/mcp"


@pytest.mark.parametrize("method", ["HEAD", "GET", "POST", "DELETE"])
async def test_every_method_the_endpoint_serves_reaches_the_edge(app: Any, method: str) -> None:
    """A foreign ``Host`` is the edge's own refusal (421), so reaching it is visible without a key."""
    async with _client(app) as http:
        answer = await http.request(method, "/mcp", headers={"host": "evil.example"})
    assert answer.status_code == 421
    assert answer.headers["content-type"] == "application/json"


async def test_a_path_below_the_endpoint_is_not_found(app: Any) -> None:
    async with _client(app) as http:
        answer = await http.post("/mcp/x", content=b"{}")
    assert answer.status_code == 404
    assert answer.text == "Not Found"


async def test_a_websocket_to_the_endpoint_is_closed_before_it_is_accepted(app: Any) -> None:
    """No websocket route: Starlette's router closes the connection (code 1000) without accepting it."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "websocket", "path": "/mcp", "root_path": "", "headers": [], "query_string": b"", "scheme": "ws",
             "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5000), "subprotocols": []}  # fmt: skip
    await app(scope, receive, send)
    assert sent == [{"type": "websocket.close", "code": 1000, "reason": ""}]


async def test_an_exception_escaping_the_edge_is_a_plain_500_and_reaches_the_server(
    app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client gets Starlette's 500; the exception is raised on to the server, which logs it."""

    def broken(self: HostPatterns, value: bytes) -> bool:
        raise RuntimeError("broken edge")

    monkeypatch.setattr(HostPatterns, "admits", broken)
    async with _client(app, raise_app_exceptions=False) as http:
        answer = await http.post("/mcp", content=b"{}")
    assert answer.status_code == 500
    assert answer.text == "Internal Server Error"
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"
    async with _client(app) as http:
        with pytest.raises(RuntimeError):
            await http.post("/mcp", content=b"{}")


async def test_the_app_keeps_its_state_routes_and_lifespan(app: Any) -> None:
    """Tests and `gateway.runtime.serve` reach the wiring through ``app.state``; the route table lists ``/mcp``."""
    assert app.state.gateway is not None and app.state.mcp is not None
    assert "/mcp" in {getattr(route, "path", None) for route in app.routes}
    messages: list[dict[str, Any]] = []
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
    assert [m["type"] for m in messages] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


@pytest.mark.parametrize("paths", [[], ["/other"], ["/other", "/mcp"]])
def test_a_root_whose_first_route_is_not_the_direct_one_is_refused(paths: list[str]) -> None:
    """Another route first could answer a request the direct route would take."""
    with pytest.raises(ValueError):
        GatewayApp(routes=[Route(path, _endpoint) for path in paths], fast_path="/mcp")


async def _endpoint(scope: Any, receive: Any, send: Any) -> None:
    """Never called."""
