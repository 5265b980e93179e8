"""The HTTP edge's telemetry: a span per admin, registry and operations request, and the access log.

Who uses it: the composition root wraps every route in `HttpTelemetry`, the one `gateway.web.root_app` serves
directly (``/mcp``) as well. It decides nothing and answers nothing itself.

Spans follow the OpenTelemetry HTTP server conventions (kind SERVER, ``http.request.method``,
``url.path``, ``http.response.status_code``, ``error.type`` for a 5xx), parented on the request's
``traceparent`` header. ``/mcp`` gets none here: one HTTP request may carry several MCP messages
and a session's messages run outside the request that delivered them, so the MCP SDK opens a
span per MCP message instead (see `gateway.telemetry.tracing`). Span names stay low-cardinality: the method
and the surface (``POST /admin/api``), never a path holding an id.

The access log line (logger ``countersign.access``, INFO, off by default) names the method, the
path without its query string (a query may carry a cursor or anything a client put there), the
status, the duration and the principal's key id once the bearer check has run; never a header.
Probes and scrapes (``/healthz``, ``/readyz``, ``/metrics``) are logged but not traced.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from opentelemetry import propagate
from opentelemetry.trace import SpanKind, StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.auth.bearer import caller_of
from gateway.printable import escape_unprintable
from gateway.telemetry.tracing import tracer

__all__ = ["HttpTelemetry"]

access = logging.getLogger("countersign.access")

_SURFACES = ("/admin/api", "/registry/api", "/admin")
_UNTRACED = frozenset({"/mcp", "/healthz", "/readyz", "/metrics"})
"""``/mcp``: the SDK traces each message; the probes and the scrape: every few seconds, they would bury the rest."""


def _surface(path: str) -> str:
    return next((s for s in _SURFACES if path == s or path.startswith(s + "/")), "/")


class HttpTelemetry:
    """ASGI middleware: a span per non-MCP request, and one access log line per request when enabled."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        logging_on = access.isEnabledFor(logging.INFO)
        path: str = scope.get("path", "")
        if path in _UNTRACED or path.startswith("/mcp/"):
            if not logging_on:
                await self.app(scope, receive, send)
                return
            await self._logged(scope, receive, send)
            return
        method = scope.get("method", "GET")
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())}
        with tracer.start_as_current_span(
            f"{method} {_surface(path)}",
            kind=SpanKind.SERVER,
            context=propagate.extract(headers),
            attributes={"http.request.method": method, "url.path": path, "url.scheme": scope.get("scheme", "http")},
        ) as span:
            status = await self._logged(scope, receive, send) if logging_on else await self._run(scope, receive, send)
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_attribute("error.type", str(status))
                span.set_status(StatusCode.ERROR)

    async def _run(self, scope: Scope, receive: Receive, send: Send) -> int:
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        await self.app(scope, receive, sending)
        return status

    async def _logged(self, scope: Scope, receive: Receive, send: Send) -> int:
        started = time.perf_counter()
        status = 500
        try:
            status = await self._run(scope, receive, send)
            return status
        finally:
            principal = caller_of(scope)
            extra: dict[str, Any] = {
                "method": scope.get("method", ""),
                "path": escape_unprintable(scope.get("path", "")),
                "status": status,
                "duration_ms": round((time.perf_counter() - started) * 1000, 3),
            }
            if principal is not None:
                extra["key_id"] = principal.key_id
            client = scope.get("client")
            if client:
                extra["client"] = str(client[0])
            access.info("%s %s %d %.1fms", extra["method"], extra["path"], status, extra["duration_ms"], extra=extra)
