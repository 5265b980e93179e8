"""An authenticating front for clients that cannot send a bearer key (the conformance suite).

It wraps the gateway's ASGI app in the same server, rather than forwarding over a second HTTP hop,
so that what the gateway sees is exactly what the client sent: the request line, every header in
its order and with its bytes (duplicates, odd whitespace and ``Host``/``Origin`` included; an HTTP
client re-encoding them would refuse or normalise some, and hide what the gateway does with them),
the body and the streamed answer. The one change is the ``Authorization`` header: whatever the
client sent is dropped and ``Bearer <key>`` is added.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["BearerProxy"]


class BearerProxy:
    """ASGI middleware that authenticates every HTTP request to `app` with `key`."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self._app = app
        self._authorization = f"Bearer {key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = [(name, value) for name, value in scope["headers"] if name.lower() != b"authorization"]
            scope = {**scope, "headers": [*headers, (b"authorization", self._authorization)]}
        await self._app(scope, receive, send)
