"""The MCP edge's answer to a flood: a ``tools/call`` whose rate budget is known spent never reaches the SDK.

Who calls it: `gateway.mcp_surface.McpSurface` puts `BudgetFront` directly in front of the SDK's
ASGI app, behind authentication and the edge checks (`gateway.mcp_edge`), so the caller is known.
It asks the executor (`AgentPath.held_refusal`: access, then the limiter's memory of refusals,
no I/O) whether the call is certainly refused, and if so answers RATE_LIMITED with ``retry_after``
itself: the same result the SDK would send, for a fraction of its cost (the SDK spends about a
millisecond of CPU on a refusal; this, tens of microseconds), so one key flooding past its budget
cannot take the event loop from the others. The refusals it answers are audited in aggregate
(`gateway.flood_audit`) and counted (``countersign_mcp_edge_refusals``).

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
the per-request ``_meta`` envelope, the ``tools/call`` params, ``Mcp-Param-*`` headers: the checks and
the answer are `gateway.mcp_modern_call`'s, shared with `gateway.mcp_direct_calls`). Anything
else, or any doubt, goes on to the SDK unchanged, where the executor decides as for every call; a
handshake-era session's calls are refused there too, without a Redis round trip.

Cost on the path of every other call: the header facts the edge already read (`gateway.mcp_headers`)
and, for a ``tools/call`` of a principal the limiter holds nothing against, one dict lookup. Nothing
here parses the body then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Final

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.auth import caller_of
from gateway.codes import Code
from gateway.executor import HeldRefusal
from gateway.flood_audit import FloodAudit
from gateway.mcp_modern_call import ModernCalls, called_tool, read_body
from gateway.metrics import count_edge_refusal
from gateway.principal import Principal

__all__ = ["BudgetFront"]


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
"""The input schema a tool is listed with (`gateway.mcp_modern_call.InputSchema`), by its name."""


class BudgetFront:
    """Answer a 2026-07-28 ``tools/call`` the caller's spent budget certainly refuses; pass everything else on."""

    def __init__(
        self, app: ASGIApp, *, calls: ModernCalls, held: Held, input_schema: InputSchema, audit: FloodAudit
    ) -> None:
        self.app = app
        self._calls = calls
        self._held = held
        self._input_schema = input_schema
        self._audit = audit
        self._delayed = 0
        self._probing: set[tuple[Principal, str]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal = caller_of(scope) if scope["type"] == "http" and scope["method"] == "POST" else None
        if principal is None:
            await self.app(scope, receive, send)
            return
        tool = called_tool(scope)
        held = self._held(principal, tool) if tool is not None else None
        if held is None or tool is None:
            await self.app(scope, receive, send)
            return
        body, receive = await read_body(receive)
        call = self._calls.parse(scope, body, tool, self._input_schema(tool)) if body is not None else None
        if call is None:
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
        answer = self._calls.render(call, held.envelope)
        count_edge_refusal(Code.RATE_LIMITED.value)
        self._audit.note(principal, tool, held.decision)
        await answer.send(send)
