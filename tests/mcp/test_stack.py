"""The ``/mcp`` endpoint is the stack `gateway.mcp.stack` documents, layer by layer, in that order."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from starlette.datastructures import Secret
from starlette.routing import Route

from gateway.config.settings import Settings
from gateway.mcp import stack
from gateway.runtime.app import create_app
from gateway.web.request_telemetry import HttpTelemetry
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio

LAYERS = ["HeaderChecks", "BearerAuth", "MessageChecks", "ScopeChecks", "BudgetFront", "StreamableHTTPASGIApp"]
"""Outermost first, down to the SDK's ASGI app."""


@pytest.fixture
async def app() -> AsyncIterator[Any]:
    """A composed gateway, never started: wiring it connects to nothing, so no Redis need answer."""
    settings = Settings(redis_url="redis://127.0.0.1:9", adapters={}, audit_secret=Secret(TEST_AUDIT_SECRET))
    composed = create_app(settings, tools=[])
    yield composed
    await composed.state.gateway.aclose()


def _layers(endpoint: Any) -> list[Any]:
    """`endpoint` and each app it wraps (``.app``), down to the SDK's ASGI app."""
    layers = [endpoint]
    while not isinstance(layers[-1], StreamableHTTPASGIApp):
        layers.append(layers[-1].app)
    return layers


def test_the_docstring_draws_the_layers_in_order() -> None:
    """The module docstring names each layer once, outermost first: the order a reader trusts."""
    assert stack.__doc__ is not None
    drawn = re.findall(r"^\s+(\w+)\(", stack.__doc__, flags=re.MULTILINE)
    assert drawn == LAYERS


async def test_the_mcp_route_serves_the_documented_stack_over_the_surface_sessions(app: Any) -> None:
    """The route's endpoint is those layers, in that order, ending in the surface's own session manager."""
    route = app.routes[0]
    assert isinstance(route, Route) and route.path == "/mcp"
    layers = _layers(route.app)
    assert [type(layer).__name__ for layer in layers] == LAYERS
    assert layers[-1].session_manager is app.state.mcp.session_manager


async def test_the_direct_route_is_wrapped_only_by_the_app_telemetry(app: Any) -> None:
    """Served without Starlette's routing, ``/mcp`` still passes the app's one user middleware, outside the stack."""
    app.build_middleware_stack()
    outer = app._fast
    assert isinstance(outer, HttpTelemetry)
    assert [type(layer).__name__ for layer in _layers(outer.app)] == LAYERS
