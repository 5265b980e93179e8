"""The MCP edge's answer to a flood: a ``tools/call`` whose rate budget is known spent never reaches the SDK.

Where it stands: directly in front of the SDK's ASGI app, behind authentication and the edge checks,
so the caller is known (`gateway.mcp.stack` assembles the layers).
It asks the executor (`AgentPath.held_refusal`: access, then the limiter's memory of refusals,
no I/O) whether the call is certainly refused, and if so answers RATE_LIMITED with ``retry_after``
itself: the same result the SDK would send, for a fraction of its cost (the SDK spends about a
millisecond of CPU on a refusal; this, tens of microseconds), so one key flooding past its budget
cannot take the event loop from the others. The refusals it answers are audited in aggregate
(`gateway.mcp.flood_audit`) and counted (``countersign_mcp_edge_refusals``).

Each refusal answered here is held back for `DELAY_SECONDS` (or its own ``retry_after``, if
shorter; it costs a timer, no CPU) and the budget checked again before answering: a client that
loops on its refusals then gets at most twenty answers a second per connection, however fast it
sends, instead of as many as the gateway can refuse, and a call whose budget refilled meanwhile goes
on to be served. When a refusal runs out, one call of the caller at a time goes on to the SDK to
learn whether the budget refilled; the others held back with it wait for that answer (a few more
delays at most) rather than all reaching the SDK at once. At most `MAX_DELAYED` are held back at
once per process; past that they are answered at once, so a flood over many connections costs
memory for no more than that many.

What it answers is only what it can answer exactly as the SDK would: a POST of the stateless
2026-07-28 era (one self-contained request, no session), ``Mcp-Method: tools/call``, whose body
passes the SDK's own request checks (the JSON-RPC envelope, the routing headers against the body,
the per-request ``_meta`` envelope, the ``tools/call`` params, ``Mcp-Param-*`` headers). Anything
else, or any doubt, goes on to the SDK unchanged, where the executor decides as for every call; a
handshake-era session's calls are refused there too, without a Redis round trip.

Cost on the path of every other call: the header facts the edge already read (`gateway.mcp.headers`)
and, for a ``tools/call`` of a principal the limiter holds nothing against, one dict lookup. Nothing
here parses the body then.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from mcp.server.lowlevel import Server
from mcp.server.streamable_http import check_accept_headers
from mcp.shared.inbound import (
    InboundModernRoute,
    classify_inbound_request,
    decode_header_value,
    find_duplicated_routing_header,
    validate_mcp_param_headers,
    x_mcp_header_map,
)
from mcp_types import SERVER_INFO_META_KEY, JSONRPCRequest, RequestId
from mcp_types import methods as mcp_methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.auth.bearer import caller_of
from gateway.codes import Code
from gateway.envelope import Envelope
from gateway.executor import HeldRefusal
from gateway.mcp.flood_audit import FloodAudit
from gateway.mcp.headers import mcp_headers
from gateway.mcp.tasks import tool_result
from gateway.principal import Principal
from gateway.telemetry.metrics import count_edge_refusal
from gateway.web.asgi_replay import replay_body, replay_message

__all__ = ["BudgetFront"]

_TOOLS_CALL: Final = b"tools/call"
_MODERN: Final = frozenset(v.encode() for v in MODERN_PROTOCOL_VERSIONS)

DELAY_SECONDS: Final = 0.05
"""How long a refusal answered here is held back (at most its own ``retry_after``): 50 ms."""
MAX_ROUNDS: Final = 3
"""Delays a held-back refusal waits, at most, for another call of its caller to learn whether the budget
has refilled (past them it goes on to the SDK itself)."""
MAX_DELAYED: Final = 1_000
"""Refusals held back at once, per process; past that they are answered at once (memory stays bounded)."""

Held = Callable[[Principal, str], "HeldRefusal | None"]
"""`AgentPath.held_refusal`."""
InputSchema = Callable[[str], "Mapping[str, Any] | None"]
"""The input schema a tool is listed with (what the SDK checks ``Mcp-Param-*`` headers against), the
same object for as long as the catalog does not change."""


class BudgetFront:
    """Answer a 2026-07-28 ``tools/call`` the caller's spent budget certainly refuses; pass everything else on."""

    def __init__(
        self, app: ASGIApp, *, server: Server[Any], held: Held, input_schema: InputSchema, audit: FloodAudit
    ) -> None:
        self.app = app
        self._server = server
        self._held = held
        self._input_schema = input_schema
        self._audit = audit
        self._stamp: dict[str, Any] | None = None
        # Per tool, its schema as last seen and whether it declares any header: a schema is the same
        # object until the catalog changes, so the SDK's schema walk runs once per tool and catalog.
        self._declares: dict[str, tuple[Mapping[str, Any], bool]] = {}
        self._delayed = 0
        self._probing: set[tuple[Principal, str]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal = caller_of(scope) if scope["type"] == "http" and scope["method"] == "POST" else None
        if principal is None:
            await self.app(scope, receive, send)
            return
        facts = mcp_headers(scope)  # read once for the whole edge
        name = facts.name
        tool = decode_header_value(name.decode("latin-1")) if name is not None else None
        held = None
        if facts.version in _MODERN and facts.method == _TOOLS_CALL and tool is not None:
            held = self._held(principal, tool)
        if held is None or tool is None:
            await self.app(scope, receive, send)
            return
        body, receive = await _body(receive)
        request = self._request(scope, body, tool) if body is not None else None
        if request is None:
            await self.app(scope, receive, send)
            return
        probe = (principal, tool)
        wait: float = min(held.retry_after, DELAY_SECONDS)
        for _ in range(MAX_ROUNDS):
            if self._delayed >= MAX_DELAYED:
                break
            # Slow a refused caller down: a client that loops on its refusals gets at most one answer per
            # delay per connection, so it cannot make the gateway refuse it at the gateway's capacity.
            self._delayed += 1
            try:
                await asyncio.sleep(wait)
            finally:
                self._delayed -= 1
            held = self._held(principal, tool)  # answered as of now: the budget may have refilled meanwhile
            if held is not None or probe not in self._probing:
                break
            wait = DELAY_SECONDS  # another call of this caller is already asking: its answer decides
        if held is None:
            # The budget may have refilled: one call of the caller at a time goes on to find out, so the
            # calls held back with it do not all reach the SDK at once when the refusal runs out.
            asking = probe not in self._probing
            if asking:
                self._probing.add(probe)
            try:
                await self.app(scope, receive, send)
            finally:
                if asking:
                    self._probing.discard(probe)
            return
        answer = self._render(*request, held.envelope)
        count_edge_refusal(Code.RATE_LIMITED.value)
        self._audit.note(principal, tool, held.decision)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    def _request(self, scope: Scope, body: bytes, tool: str) -> tuple[RequestId, str] | None:
        """The request's id and protocol version when the SDK's own checks of the request all pass and it
        names `tool`; None otherwise (then the SDK, not this, answers whatever is wrong)."""
        lines = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        # The SDK's own first checks: a JSON body (else 400), and an Accept naming JSON and, since this
        # gateway's responses may stream, SSE (else 406).
        content_type = next((value for name, value in lines if name == "content-type"), "")
        if not content_type.lower().startswith("application/json") or not all(check_accept_headers(Request(scope))):
            return None
        if find_duplicated_routing_header(lines) is not None:
            return None
        try:
            decoded = json.loads(body)
            rpc = JSONRPCRequest.model_validate(decoded)
        except (ValueError, RecursionError):  # a ValidationError is a ValueError
            return None
        if rpc.method != "tools/call":
            return None
        route = classify_inbound_request(decoded, headers=dict(lines))
        params = rpc.params or {}
        if not isinstance(route, InboundModernRoute) or params.get("name") != tool:
            return None
        try:
            mcp_methods.validate_client_request("tools/call", route.protocol_version, params)
        except (ValidationError, ValueError, KeyError):
            return None
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, Mapping) or not self._headers_agree(scope, tool, arguments):
            return None
        return rpc.id, route.protocol_version

    def _render(self, request_id: RequestId, version: str, envelope: Envelope) -> bytes:
        """The response body the SDK would send for `envelope` as the result of request `request_id`."""
        dumped = tool_result(envelope).model_dump(by_alias=True, mode="json", exclude_none=True)
        result = mcp_methods.serialize_server_result("tools/call", version, dumped)
        if self._stamp is None:  # the SDK copies it for every result; it never changes while serving
            self._stamp = self._server.server_info_stamp
        # The stamp the SDK puts on every 2026-era result (its `_stamp_server_info`).
        result["_meta"] = {**result.get("_meta", {}), SERVER_INFO_META_KEY: self._stamp}
        return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}, separators=(",", ":")).encode()

    def _headers_agree(self, scope: Scope, tool: str, arguments: Mapping[str, Any]) -> bool:
        """Whether the SDK's ``Mcp-Param-*`` check passes: at once for a schema that declares no header
        (the check compares only declared ones), else by the SDK's own function."""
        schema = self._input_schema(tool)
        if schema is None:
            return True
        known = self._declares.get(tool)
        if known is None or known[0] is not schema:
            known = self._declares[tool] = (schema, bool(x_mcp_header_map(schema)))
        return not known[1] or validate_mcp_param_headers(schema, arguments, Request(scope).headers) is None


async def _body(receive: Receive) -> tuple[bytes | None, Receive]:
    """The whole request body (None if the client left), and a `receive` that yields it again."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None, replay_message(message, receive)
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            body = b"".join(chunks)
            return body, replay_body(body, receive)
