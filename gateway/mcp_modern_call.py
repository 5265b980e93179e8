"""A 2026-07-28 ``tools/call`` read off the ASGI request and answered as the SDK would answer it.

Who uses it: the two layers in front of the SDK that answer such a call without it, the budget
front (`gateway.mcp_budget_front`: a call a spent budget certainly refuses) and the direct calls
(`gateway.mcp_direct_calls`: a read tool served straight from the request). Each asks `parse`
whether the request passes every check the SDK's 2026-era entry makes (mcp 2.3.0,
``mcp.server._streamable_http_modern.handle_modern_request``) and names the tool the headers name;
only then does it answer, with `render` (a result) or `render_error` (an exception a handler raised),
which build the bytes the SDK builds for them. On any doubt `parse` answers None and the layer hands
the request on to the SDK unchanged, which answers whatever is wrong. `tests/test_mcp_direct_calls.py`
compares both answers with the SDK's, byte for byte, over generated requests.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mcp.server.lowlevel import Server
from mcp.server.runner import modern_error_data
from mcp.server.streamable_http import check_accept_headers
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    InboundModernRoute,
    classify_inbound_request,
    decode_header_value,
    find_duplicated_routing_header,
    validate_mcp_param_headers,
    x_mcp_header_map,
)
from mcp_types import INTERNAL_ERROR, SERVER_INFO_META_KEY, JSONRPCError, JSONRPCRequest, RequestId
from mcp_types import methods as mcp_methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from gateway.asgi_replay import replay_body, replay_message
from gateway.envelope import Envelope
from gateway.mcp_headers import mcp_headers
from gateway.mcp_tasks import tool_result

__all__ = ["Answer", "InputSchema", "ModernCall", "ModernCalls", "called_tool", "read_body"]

InputSchema = Mapping[str, Any] | None
"""The input schema a tool is listed with (what the SDK checks ``Mcp-Param-*`` headers against), the
same object for as long as the catalog does not change; None for a tool not listed."""

logger = logging.getLogger(__name__)

_OK: Final = 200
_TOOLS_CALL: Final = b"tools/call"
_MODERN: Final = frozenset(v.encode() for v in MODERN_PROTOCOL_VERSIONS)


def called_tool(scope: Scope) -> str | None:
    """The tool a 2026-era ``tools/call`` names in its ``Mcp-Name`` header, from the header facts the edge
    already read (`gateway.mcp_headers`); None for any other request. The body is not read: `parse`
    checks that it agrees."""
    facts = mcp_headers(scope)
    if facts.version not in _MODERN or facts.method != _TOOLS_CALL or facts.name is None:
        return None
    return decode_header_value(facts.name.decode("latin-1"))


@dataclass(frozen=True, slots=True)
class ModernCall:
    """A request `ModernCalls.parse` passed: what answering it needs."""

    request_id: RequestId
    version: str
    arguments: Mapping[str, Any] | None
    """The call's ``arguments`` as sent (None when absent), as the SDK hands them to its handler."""


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer: its status and JSON body."""

    status: int
    body: bytes

    async def send(self, send: Send) -> None:
        """Send it as the SDK's ``Response(..., media_type="application/json")`` does."""
        headers = [(b"content-length", str(len(self.body)).encode()), (b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": self.body})


class ModernCalls:
    """The SDK's checks of a 2026-era ``tools/call`` and its answers to one, for one SDK server."""

    def __init__(self, server: Server[Any]) -> None:
        self._server = server
        self._stamp: dict[str, Any] | None = None
        # Per tool, its schema as last seen and whether it declares any header: a schema is the same
        # object until the catalog changes, so the SDK's schema walk runs once per tool and catalog.
        self._declares: dict[str, tuple[Mapping[str, Any], bool]] = {}

    def parse(self, scope: Scope, body: bytes, tool: str, schema: InputSchema) -> ModernCall | None:
        """The call when the SDK's own checks of the request all pass and it names `tool` (whose listed
        input schema is `schema`); None otherwise (then the SDK, not this, answers whatever is wrong)."""
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
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, Mapping):
            return None
        if not self._headers_agree(scope, tool, schema, arguments or {}):
            return None
        return ModernCall(rpc.id, route.protocol_version, arguments)

    def render(self, call: ModernCall, envelope: Envelope) -> Answer:
        """The SDK's answer to `call` when its handler returns `envelope`'s ``tools/call`` result."""
        dumped = tool_result(envelope).model_dump(by_alias=True, mode="json", exclude_none=True)
        try:
            result = mcp_methods.serialize_server_result("tools/call", call.version, dumped)
        except ValidationError as error:  # the SDK's answer to a handler's invalid result: INTERNAL_ERROR
            return self.render_error(call, error)
        if self._stamp is None:  # the SDK copies it for every result; it never changes while serving
            self._stamp = self._server.server_info_stamp
        # The stamp the SDK puts on every 2026-era result (its `_stamp_server_info`).
        result["_meta"] = {**result.get("_meta", {}), SERVER_INFO_META_KEY: self._stamp}
        body = {"jsonrpc": "2.0", "id": call.request_id, "result": result}
        return Answer(_OK, json.dumps(body, separators=(",", ":")).encode())

    def render_error(self, call: ModernCall, error: Exception) -> Answer:
        """The SDK's answer to `call` when its handler raises `error` (its `_to_jsonrpc_response`, `_write`)."""
        if isinstance(error, ValidationError):  # a result the SDK's sieve refused: a server bug, as the SDK says
            logger.error("handler for 'tools/call' returned an invalid result")
            error = MCPError(code=INTERNAL_ERROR, message="Handler returned an invalid result")
        message = JSONRPCError(jsonrpc="2.0", id=call.request_id, error=modern_error_data(error))
        body = message.model_dump(mode="json", by_alias=True, exclude_none=True)
        status = ERROR_CODE_HTTP_STATUS.get(message.error.code, _OK)
        return Answer(status, json.dumps(body, separators=(",", ":")).encode())

    def _headers_agree(self, scope: Scope, tool: str, schema: InputSchema, arguments: Mapping[str, Any]) -> bool:
        """Whether the SDK's ``Mcp-Param-*`` check passes: at once for a schema that declares no header
        (the check compares only declared ones), else by the SDK's own function."""
        if schema is None:
            return True
        known = self._declares.get(tool)
        if known is None or known[0] is not schema:
            known = self._declares[tool] = (schema, bool(x_mcp_header_map(schema)))
        return not known[1] or validate_mcp_param_headers(schema, arguments, Request(scope).headers) is None


async def read_body(receive: Receive) -> tuple[bytes | None, Receive]:
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
