"""Fixtures for the backend services: a fresh app per test, served by one real uvicorn for the session.

Starting and stopping uvicorn costs about 0.2 s, so the session runs a single server (in a thread, via
``serve_app_in_thread``) whose ASGI callable forwards to whichever app the current test installed. Each
test still gets a brand-new app with its own state, its own fake clock and its own ``httpx.AsyncClient``
over loopback. ``serve_app`` itself, the async variant, is covered in ``test_serve.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from backends import OrdersService, RoomsService, create_orders_app, create_rooms_app, serve_app_in_thread
from tests.support.services import TEST_SIGNING_KEY

TOKEN = "backend-test-token"
KEY_TTL_SECONDS = 60.0

ServiceT = TypeVar("ServiceT")


class FakeClock:
    """A monotonic clock that moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class AppHost:
    """An ASGI app that forwards to the app the current test installed, so one server serves them all."""

    def __init__(self) -> None:
        self.url = ""
        self._app: ASGIApp = JSONResponse({"error": "no_app_installed"}, status_code=503)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)

    @contextmanager
    def hosting(self, app: ASGIApp) -> Iterator[None]:
        previous, self._app = self._app, app
        try:
            yield
        finally:
            self._app = previous


@dataclass(frozen=True, kw_only=True, slots=True)
class Running(Generic[ServiceT]):
    """A served app as a test sees it."""

    app: Starlette
    service: ServiceT
    """``app.state.service``, for checking effects directly."""
    client: httpx.AsyncClient
    """Talks to the app with the service token set, and no identity headers."""
    clock: FakeClock
    url: str
    token: str = TOKEN
    key_ttl_seconds: float = KEY_TTL_SECONDS


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def app_host() -> Iterator[AppHost]:
    host = AppHost()
    with serve_app_in_thread(host) as url:
        host.url = url
        yield host


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def rooms(app_host: AppHost, clock: FakeClock) -> AsyncIterator[Running[RoomsService]]:
    """A fresh rooms service with the demo data, reachable over loopback."""
    app = create_rooms_app(
        service_token=TOKEN, signing_key=TEST_SIGNING_KEY, key_ttl_seconds=KEY_TTL_SECONDS, clock=clock
    )
    async for running in _run(app_host, app, clock):
        yield running


@pytest.fixture
async def orders(app_host: AppHost, clock: FakeClock) -> AsyncIterator[Running[OrdersService]]:
    """A fresh orders service with the demo data, reachable over loopback."""
    app = create_orders_app(
        service_token=TOKEN, signing_key=TEST_SIGNING_KEY, key_ttl_seconds=KEY_TTL_SECONDS, clock=clock
    )
    async for running in _run(app_host, app, clock):
        yield running


async def _run(host: AppHost, app: Starlette, clock: FakeClock) -> AsyncIterator[Running[Any]]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with host.hosting(app):
        async with httpx.AsyncClient(base_url=host.url, headers=headers, timeout=5.0) as client:
            yield Running(app=app, service=app.state.service, client=client, clock=clock, url=host.url)
