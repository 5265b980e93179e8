"""The gateway's root ASGI app: requests to the MCP endpoint go straight to its edge, the rest through Starlette.

Who builds it: `gateway.runtime.app.create_app`, with the route table and middleware it would give Starlette,
and the path of the one route that is the hot one (``/mcp``, first in the table). What it asks of that route: an ASGI
endpoint that neither raises `HTTPException` nor reads the router's scope keys (``router``, ``route``,
``endpoint``, ``path_params``), as the MCP edge does not.

Starlette's own layers (ServerErrorMiddleware, ExceptionMiddleware, the Router's match over the route
table, the Route) cost every MCP read and proposal a few tens of microseconds and decide nothing for
it. So a request for exactly that route's path in one of its methods goes to its endpoint behind the
same user middleware (`HttpTelemetry`) and nothing else. Everything else goes through Starlette's stack
as before, from the same route table, which still holds the route: another method (405 with
``Allow``), ``/mcp/`` (the trailing-slash redirect), a websocket, the lifespan.

An exception escaping the endpoint is answered as ServerErrorMiddleware answers it without a handler
and out of debug mode (which is why this app takes neither): a plain-text 500 when nothing was sent yet;
then it is raised on to the server, which logs it.

A start the lifespan refuses as a configuration error (`refuse_start`: a policy set that does not validate
against the tools served once the fronted servers are listed) is told to the server as a failed start without
the traceback Starlette would hand it to log; whoever runs the server raises `refused` as it raises any other
configuration error (`gateway.runtime.serve`), one message and a non-zero exit.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette._utils import get_route_path
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Lifespan, Message, Receive, Scope, Send

from gateway.errors import ConfigError

__all__ = ["GatewayApp"]


class GatewayApp(Starlette):
    """Starlette, with the route at `fast_path` served without Starlette's routing and exception layers."""

    def __init__(
        self,
        *,
        routes: Sequence[BaseRoute],
        fast_path: str,
        middleware: Sequence[Middleware] = (),
        lifespan: Lifespan[GatewayApp] | None = None,
    ) -> None:
        """Raises:
        ValueError: the first of `routes` is not a `Route` for `fast_path` (first, so that no other route
            could have answered a request the direct route takes)."""
        super().__init__(routes=routes, middleware=middleware, lifespan=lifespan)
        fast = routes[0] if routes else None
        if not isinstance(fast, Route) or fast.path != fast_path:
            raise ValueError(f"the first route must be the one for {fast_path!r}, to serve it directly")
        self._fast_path = fast_path
        self._fast_methods = frozenset(fast.methods or ())
        self._fast_endpoint = fast.app
        self._fast: ASGIApp = fast.app
        self.refused: ConfigError | None = None
        """The configuration error that stopped the start (`refuse_start`); None while none did."""

    def refuse_start(self, error: ConfigError) -> None:
        """Record that the lifespan's start failed for `error` (it raises it next): the server is told the start
        failed, with no traceback to log, and `refused` holds the reason for whoever runs the server."""
        self.refused = error

    def build_middleware_stack(self) -> ASGIApp:
        """Starlette's stack, and the direct route behind the same user middleware (both built on first use,
        so middleware added before it is in both)."""
        endpoint = self._fast_endpoint
        for cls, args, kwargs in reversed(self.user_middleware):
            endpoint = cls(endpoint, *args, **kwargs)
        self._fast = endpoint
        return super().build_middleware_stack()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await super().__call__(scope, receive, self._lifespan_sender(send))
            return
        if (
            scope["type"] != "http"
            or scope["method"] not in self._fast_methods
            or get_route_path(scope) != self._fast_path
        ):
            await super().__call__(scope, receive, send)
            return
        scope["app"] = self
        if self.middleware_stack is None:
            self.middleware_stack = self.build_middleware_stack()
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self._fast(scope, receive, sending)
        except Exception:
            if not started:
                await PlainTextResponse("Internal Server Error", status_code=500)(scope, receive, send)
            raise

    def _lifespan_sender(self, send: Send) -> Send:
        async def sending(message: Message) -> None:
            if message["type"] == "lifespan.startup.failed" and self.refused is not None:
                message = {"type": "lifespan.startup.failed", "message": ""}  # the reason is `refused`, told once
            await send(message)

        return sending
