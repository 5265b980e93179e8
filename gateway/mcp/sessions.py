"""Sessions per key: the SDK's session manager, holding each key to a number of concurrent sessions.

Who uses it: `gateway.mcp.surface.McpSurface`, in place of the SDK's `StreamableHTTPSessionManager`.
Only the 2025-11-25 era has sessions (an ``initialize`` handshake, then ``Mcp-Session-Id``); the
2026-07-28 envelope and the legacy stateless mode open none and are not counted.

The hook is the SDK's own admission step (`_admit_session`, called under its creation lock,
synchronously, so the check and the registration cannot interleave with another request's) and its
one exit (`_discard_session`, reached however a session ends: DELETE, idle timeout, crash, a refused
opening request). At the cap, admission raises `SessionQuotaExceededError` before the SDK registers
anything; the manager's ASGI entry turns it into HTTP 429 with a JSON-RPC error (no id: the request
was refused before its body was read, as the SDK's own 503 at its global cap is) whose ``data``
carries ``code: QUOTA_EXCEEDED``, the limit and the count, and hands the refusal to `on_refused` to
audit. The refusal is retryable, with ``Retry-After``: a slot frees by itself when one of the key's
sessions idles out, so the answer says when the first of them will (the SDK keeps each session's
idle deadline on its transport), or `session_idle_timeout` when every one is busy.

For client authors: a 2025-11-25 client should end its session with ``DELETE /mcp`` (header
``Mcp-Session-Id``) when it is done, which frees the slot at once; a client that never does (the
MCP Inspector CLI, one session per invocation) holds its slot until the session has been unused for
``[limits] session_idle_seconds``. The 2026-07-28 era opens no session and is never refused here.

Why the count lives in this process, not in Redis: a session is this process's memory (its
transport, its server task) and only this process can serve it, so with several gateways behind
sticky routing each one holds and bounds its own. A count in Redis would outlive a crashed
process's sessions and need leases to heal; a count here dies with them. The cost: behind R
gateways one key may hold up to R times its cap in all.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Receive, Scope, Send

from gateway.codes import Code
from gateway.errors import SessionQuotaExceededError

__all__ = ["SESSION_QUOTA_ERROR", "KeyedSessionManager", "SessionQuotaExceededError"]

SESSION_QUOTA_ERROR = -32010
"""The JSON-RPC code of the refusal: implementation-defined (-32000..-32019 in the MCP allocation)."""


OnRefused = Callable[[Scope, SessionQuotaExceededError], Awaitable[None]]
"""Called with the request's scope for every refused ``initialize`` (the surface audits it)."""


class KeyedSessionManager(StreamableHTTPSessionManager):
    """`StreamableHTTPSessionManager` with at most `sessions_per_key` concurrent sessions per key.

    A key is the ``client_id`` the SDK binds a session to (`gateway.auth.bearer.BearerAuth` sets it to the key
    id). Closing or idling out a session frees its slot at once.
    """

    def __init__(
        self,
        app: Server[Any],
        *,
        sessions_per_key: int,
        on_refused: OnRefused,
        on_closed: Callable[[str], object] = lambda session_id: None,
        **options: Any,
    ) -> None:
        if sessions_per_key < 1:
            raise ValueError("sessions_per_key must be at least 1")
        super().__init__(app, **options)
        self.sessions_per_key = sessions_per_key
        self._on_refused = on_refused
        self._on_closed = on_closed  # told each session id once it is gone, to drop what else holds it
        self._key_of: dict[str, str] = {}  # session id -> key id
        self._sessions_of: dict[str, set[str]] = {}  # key id -> its open session ids
        # `asgi_app` (the SDK's body-size limit around its request handler) is what
        # `StreamableHTTPASGIApp` calls; wrapping the handler inside it catches the refusal raised
        # under the SDK's lock, before any response was started.
        served = self.asgi_app.app

        async def refusing(scope: Scope, receive: Receive, send: Send) -> None:
            try:
                await served(scope, receive, send)
            except SessionQuotaExceededError as refusal:
                await self._on_refused(scope, refusal)
                await _send_refusal(send, refusal)

        self.asgi_app.app = refusing

    def open_sessions(self, key_id: str) -> int:
        """How many sessions `key_id` holds in this process now."""
        return len(self._sessions_of.get(key_id, ()))

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        key_id = requestor["client_id"] if requestor is not None else ""
        held = self._sessions_of.get(key_id, set())
        if len(held) >= self.sessions_per_key:
            raise SessionQuotaExceededError(
                key_id, limit=self.sessions_per_key, open_sessions=len(held), retry_after=self._first_free(held)
            )
        transport = super()._admit_session(requestor)
        if transport is not None and transport.mcp_session_id is not None:
            self._key_of[transport.mcp_session_id] = key_id
            self._sessions_of.setdefault(key_id, set()).add(transport.mcp_session_id)
        return transport

    def _first_free(self, held: set[str]) -> int:
        """Seconds until the first of `held` idles out: the soonest idle deadline the SDK set on their
        transports (infinite while a request or a GET stream is open); the whole idle timeout if none is set."""
        idle = self.session_idle_timeout or 0.0
        deadlines = [
            scope.deadline
            for session_id in held
            if (transport := self._server_instances.get(session_id)) is not None
            and (scope := transport.idle_scope) is not None
            and math.isfinite(scope.deadline)
        ]
        wait = min(deadlines) - anyio.current_time() if deadlines else idle
        return max(1, math.ceil(min(wait, idle) if idle else wait))

    async def _discard_session(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        # Reached once or twice per session (a DELETE, then its server task's end): forgetting is idempotent.
        key_id = self._key_of.pop(session_id, None)
        if key_id is not None:
            held = self._sessions_of.get(key_id, set())
            held.discard(session_id)
            if not held:
                self._sessions_of.pop(key_id, None)
        self._on_closed(session_id)
        await super()._discard_session(session_id, transport)


async def _send_refusal(send: Send, refusal: SessionQuotaExceededError) -> None:
    data = {
        "code": Code.QUOTA_EXCEEDED.value,
        "limit": refusal.limit,
        "open": refusal.open_sessions,
        # Unlike the card quota, this one frees itself: a session idles out without anyone acting.
        "retryable": True,
        "retry_after": refusal.retry_after,
    }
    message = (
        f"Too many open sessions for this key: retry in {refusal.retry_after} s, or close a session "
        "(DELETE /mcp with its Mcp-Session-Id) and initialize again"
    )
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": SESSION_QUOTA_ERROR, "message": message, "data": data}}
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(refusal.retry_after).encode()),
    ]
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": body})
