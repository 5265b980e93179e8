"""CPU the MCP edge (`gateway.mcp.edge`) and everything in front of the SDK add to one request, in process.

    .venv/bin/python bench/mcp_edge_cost.py        # about 30 s; pin it with taskset -c 1 on a busy box

Both edge layers around an ASGI app that reads the body and answers three SSE frames, against the app
alone, for a ``tools/call`` as the official client sends it in each era; then the whole front as
`create_app` composes it for an API key (the root app, `HttpTelemetry`, the edge, `BearerAuth` over a
warm key cache, the scope checks, the budget front with nothing held), once through the root's direct route and once
through Starlette's stack; then the id scan against the parse it replaces. Medians of 7 interleaved
rounds of process CPU time. The end-to-end read path costs about a millisecond of server CPU per call
(bench/HISTORY.md), so this is the share to compare.
"""

from __future__ import annotations

import asyncio
import functools
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import pydantic_core
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route

from gateway.audit.events import ListAuditSink
from gateway.auth.bearer import BearerAuth
from gateway.auth.oauth_resource import ScopeChecks
from gateway.auth.tokens import TokenVerifier
from gateway.config.oauth import OAuthSection
from gateway.limits.budgets import Limits
from gateway.limits.rate_limiter import AddressBudgets
from gateway.mcp.budget_front import BudgetFront
from gateway.mcp.edge import HeaderChecks, MessageChecks, needs_parse
from gateway.mcp.flood_audit import FloodAudit
from gateway.principal import KeyKind, Principal
from gateway.store.keys import KeyCache
from gateway.web.request_telemetry import HttpTelemetry
from gateway.web.root_app import GatewayApp

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
}
ARGUMENTS = {"room_id": "room-atlas", "date": "2026-12-01"}
BODY = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 17,
        "method": "tools/call",
        "params": {"name": "rooms_availability", "arguments": ARGUMENTS, "_meta": META},
    },
    separators=(",", ":"),
).encode()
LARGE_ARGUMENTS = {"text": "lorem ipsum " * 800, "items": [{"k": i, "v": "abc"} for i in range(200)]}
LARGE = json.dumps(
    {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "x", "arguments": LARGE_ARGUMENTS}}
).encode()
COMMON = [
    (b"host", b"127.0.0.1:8765"),
    (b"user-agent", b"python-httpx/0.28"),
    (b"accept-encoding", b"gzip, deflate"),
    (b"connection", b"keep-alive"),
    (b"authorization", b"Bearer csk_agent_0123456789abcdef0123456789abcdef"),
    (b"accept", b"application/json, text/event-stream"),
    (b"content-type", b"application/json"),
    (b"content-length", str(len(BODY)).encode()),
]
ERAS = {
    "2026-07-28": [
        *COMMON,
        (b"mcp-protocol-version", b"2026-07-28"),
        (b"mcp-method", b"tools/call"),
        (b"mcp-name", b"rooms_availability"),
    ],
    "2025-11-25 session": [
        *COMMON,
        (b"mcp-protocol-version", b"2025-11-25"),
        (b"mcp-session-id", b"0123456789abcdef0123456789abcdef"),
    ],
}


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    for _ in range(2):
        await send({"type": "http.response.body", "body": b"data: x\r\n\r\n", "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


class _Sdk:
    """Where the SDK's ASGI app would be (a class, so a `Route` passes ASGI calls to it)."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await _app(scope, receive, send)


class _Keys:
    """The key store behind the agents' cache: every token is one agent's (the cache stays warm)."""

    async def resolve(self, token: str) -> Principal:
        return Principal(subject="bench@acme.example", org="acme", roles=frozenset({"staff"}), key_id="k1")


def _front(audit: ListAuditSink, *, direct: bool) -> Any:
    """The /mcp path as `gateway.mcp.stack` composes it without OAuth issuers, in front of `_Sdk`:
    the scope checks and the token verifier stand there too, doing nothing for a key."""
    budget = BudgetFront(
        _Sdk(),
        server=None,  # type: ignore[arg-type]
        held=lambda principal, tool: None,
        input_schema=lambda tool: None,
        audit=FloodAudit(audit),
    )
    oauth, scoped = TokenVerifier(OAuthSection()), ScopeChecks(budget, config=OAuthSection(), audit=audit)
    keys = KeyCache(_Keys(), ttl_seconds=3600)  # type: ignore[arg-type]
    floods = AddressBudgets(Limits().unauthenticated)
    authenticated = BearerAuth(
        MessageChecks(scoped, audit=audit),
        keys=keys,
        kind=KeyKind.AGENT,
        audit=audit,
        realm="mcp",
        floods=floods,
        tokens=oauth,
    )
    edge = HeaderChecks(authenticated, audit=audit, allowed_hosts=["127.0.0.1:*", "localhost:*"], allowed_origins=[])
    routes = [Route("/mcp", edge, methods=["GET", "POST", "DELETE"])]
    if direct:
        return GatewayApp(routes=routes, fast_path="/mcp", middleware=[Middleware(HttpTelemetry)])
    return Starlette(routes=routes, middleware=[Middleware(HttpTelemetry)])


async def _per_request(app: Any, headers: list[tuple[bytes, bytes]], count: int) -> float:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(message: Any) -> None:
        pass

    start = time.process_time()
    for _ in range(count):
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/mcp",
            "headers": list(headers),
            "client": ("127.0.0.1", 5000),
        }
        await app(scope, receive, send)
    return (time.process_time() - start) / count * 1e6


def _per_call(call: Callable[[], object], count: int) -> float:
    start = time.process_time()
    for _ in range(count):
        call()
    return (time.process_time() - start) / count * 1e6


async def main() -> None:
    audit = ListAuditSink()
    edge = HeaderChecks(
        MessageChecks(_app, audit=audit), audit=audit, allowed_hosts=["127.0.0.1:*", "localhost:*"], allowed_origins=[]
    )
    for era, headers in ERAS.items():
        added = []
        for _ in range(7):
            bare = await _per_request(_app, headers, 20_000)
            added.append(await _per_request(edge, headers, 20_000) - bare)
        print(
            f"{era}: the edge adds {statistics.median(added):.2f} µs per request "
            f"(rounds {min(added):.2f}-{max(added):.2f})"
        )
    fronts = {"the root's direct route": _front(audit, direct=True), "Starlette's stack": _front(audit, direct=False)}
    headers = ERAS["2026-07-28"]
    added_by: dict[str, list[float]] = {name: [] for name in fronts}
    for _ in range(7):
        bare = await _per_request(_app, headers, 20_000)
        for name, front in fronts.items():
            added_by[name].append(await _per_request(front, headers, 20_000) - bare)
    for name, added in added_by.items():
        print(
            f"2026-07-28, the whole front through {name}: adds {statistics.median(added):.2f} µs per request "
            f"(rounds {min(added):.2f}-{max(added):.2f})"
        )
    for body in (BODY, LARGE):
        for name, check in (("id scan", needs_parse), ("pydantic-core parse", pydantic_core.from_json)):
            count = 20_000 if body is BODY else 2_000
            median = statistics.median(_per_call(functools.partial(check, body), count) for _ in range(7))
            print(f"{name} of a {len(body):,}-byte body: {median:.2f} µs")


if __name__ == "__main__":
    asyncio.run(main())
