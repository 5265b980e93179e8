"""The lean request path: a 2026-07-28 ``tools/call`` of a read tool served straight from the ASGI request.

Who calls it: `gateway.mcp_surface.McpSurface` puts `DirectCalls` right in front of the SDK's ASGI
app, behind the budget front (`gateway.mcp_budget_front`), so authentication, the edge checks
(`gateway.mcp_edge`) and a spent budget's refusal have all been decided before it.

Why: a 2026-era request is self-contained (no session, no handshake), so serving one needs no state
the SDK keeps. Yet the SDK spends about a millisecond of CPU on each (its request and context models,
a task group and a memory stream per request for the deferred SSE answer, the middleware chain, the
result's models), several times what the executor, the backend call and the audit append cost together
(bench/README.md). This layer makes the SDK's own checks of the request (`gateway.mcp_modern_call`:
the same functions the SDK calls), hands the principal, the tool and the arguments to the same
executor call the SDK's handler makes (`AgentPath.execute`), and answers what the SDK answers: the
same status, headers and JSON body, byte for byte (`tests/test_mcp_direct_calls.py` compares them over
generated requests, and the official conformance suite runs through it).

What it serves, and what it leaves to the SDK:

* only a POST of an authenticated caller whose headers say ``tools/call`` at a 2026-era version, of a
  tool the catalog lists as a read (`Mode.READ`, not `changes_cards`) with a timeout under
  `MAX_TIMEOUT_SECONDS`; writes and card tools stay with the SDK (a proposal may answer as a task), and
  so does a tool that may run past the SDK's SSE deferral (15 s, after which the SDK commits an event
  stream to keep the connection alive);
* only a request every SDK check passes (`ModernCalls.parse`); anything else, and every other method and
  the 2025-11-25 era, goes to the SDK unchanged, which answers it;
* nothing while a tracer is installed: the SDK then opens a span per MCP message, which this does not.

Two differences, both on purpose: the call is not cancelled when the client disconnects (the SDK's SSE
mode cancels it; a read then still ends with its audit entry, and nobody reads the answer), and the
key id is bound for log records here rather than by the surface's SDK middleware (the same binding).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.auth import caller_of
from gateway.envelope import Envelope
from gateway.log_context import bind_key_id
from gateway.mcp_modern_call import InputSchema, ModernCalls, called_tool, read_body
from gateway.principal import Principal
from gateway.tool import Mode, Tool

__all__ = ["MAX_TIMEOUT_SECONDS", "DirectCalls"]

MAX_TIMEOUT_SECONDS: Final = 14.0
"""A read tool whose timeout is this or more goes to the SDK: it may run past the SDK's 15 s SSE deferral."""

Execute = Callable[[Principal, str, "Mapping[str, Any] | None"], Awaitable[Envelope]]
"""`AgentPath.execute`."""
Listed = Callable[[str], "Tool | None"]
"""The catalog's tool of a name, or None when it lists none."""


class DirectCalls:
    """Serve a 2026-era ``tools/call`` of a read tool without the SDK, as the SDK would; pass everything else on."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        calls: ModernCalls,
        execute: Execute,
        listed: Listed,
        input_schema: Callable[[str], InputSchema],
        enabled: bool = True,
    ) -> None:
        self.app = app
        self._calls = calls
        self._execute = execute
        self._listed = listed
        self._input_schema = input_schema
        self._enabled = enabled

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        post = self._enabled and scope["type"] == "http" and scope["method"] == "POST"
        principal = caller_of(scope) if post else None
        name = called_tool(scope) if principal is not None else None
        if principal is None or name is None or not self._serves(name):
            await self.app(scope, receive, send)
            return
        body, receive = await read_body(receive)
        call = self._calls.parse(scope, body, name, self._input_schema(name)) if body is not None else None
        if call is None:
            await self.app(scope, receive, send)
            return
        bind_key_id(principal.key_id)
        try:
            envelope = await self._execute(principal, name, call.arguments)
        except Exception as error:  # the SDK's answer to a handler that raised: a JSON-RPC error, no traceback
            answer = self._calls.render_error(call, error)
        else:
            answer = self._calls.render(call, envelope)
        await answer.send(send)

    def _serves(self, name: str) -> bool:
        """Whether a call of `name` is one this serves: a listed read that cannot outlast the SSE deferral.

        The catalog may change while the call runs; the executor looks the tool up again and decides.
        A tool that became a write meanwhile files its card and answers with its receipt, as the SDK's
        handler answers a client that asked for no task."""
        tool = self._listed(name)
        return (
            tool is not None
            and tool.mode is Mode.READ
            and not tool.changes_cards
            and tool.timeout_seconds < MAX_TIMEOUT_SECONDS
        )
