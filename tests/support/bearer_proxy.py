"""An authenticating reverse proxy for clients that cannot send a bearer key (the conformance suite).

It forwards every request to the gateway unchanged except for one added ``Authorization`` header:
the method, the path, every other header in its order (duplicates and ``Host``/``Origin`` included,
so the gateway's own header checks see what the client sent) and the body. Responses stream back as
they arrive, so SSE behaves as it would without the proxy. A client-sent ``Authorization`` is
replaced, never passed beside the key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

__all__ = ["BearerProxy"]

# Per-hop headers (RFC 9110 section 7.6.1) are the proxy's own business, not the gateway's.
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding", b"upgrade"}
)

_DROPPED_REQUEST = _HOP_BY_HOP | {b"authorization"}
# The body is re-chunked on the way back, so its length is the proxy's to state.
_DROPPED_RESPONSE = _HOP_BY_HOP | {b"content-length"}


class BearerProxy:
    """An ASGI app forwarding to `upstream` (a base URL) with ``Authorization: Bearer <key>``."""

    def __init__(self, upstream: str, key: str) -> None:
        self._upstream = upstream.rstrip("/")
        self._authorization = f"Bearer {key}".encode()
        self._client: httpx.AsyncClient | None = None

    @asynccontextmanager
    async def _lifespan(self) -> AsyncIterator[None]:
        async with httpx.AsyncClient(timeout=httpx.Timeout(60.0), follow_redirects=False) as client:
            self._client = client
            yield
        self._client = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        client = self._client
        if client is None:  # uvicorn runs the lifespan before the first request
            raise RuntimeError("the proxy's lifespan has not started")
        request = Request(scope, receive)
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _DROPPED_REQUEST]
        headers.append((b"authorization", self._authorization))
        query = scope.get("query_string", b"")
        url = self._upstream + scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        if query:
            url += "?" + query.decode("latin-1")
        upstream = client.build_request(request.method, url, headers=headers, content=request.stream())
        answer = await client.send(upstream, stream=True)
        response = StreamingResponse(
            answer.aiter_raw(),
            status_code=answer.status_code,
            headers={},
            background=BackgroundTask(answer.aclose),
        )
        response.raw_headers = [(k.lower(), v) for k, v in answer.headers.raw if k.lower() not in _DROPPED_RESPONSE]
        await response(scope, receive, send)

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        lifespan = self._lifespan()
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await lifespan.__aenter__()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await lifespan.__aexit__(None, None, None)
                await send({"type": "lifespan.shutdown.complete"})
                return
