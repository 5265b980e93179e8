"""The composition root: the only place that builds Redis clients, HTTP clients and layers.

`create_app(settings, tools=...)` wires one gateway: the key store and audit sink over one Redis
client, one HTTP client per adapter, the executor, the catalog, and the surfaces. `settings`
must be resolved (a Redis URL and a URL for every adapter); `gateway.serve` resolves the
embedded defaults before it calls this.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

import httpx
import redis.asyncio as aioredis
from httpx_aiohttp import AiohttpTransport
from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.admin_api import admin_routes
from gateway.audit import RedisStreamAuditSink
from gateway.auth import BearerAuth
from gateway.cards import CardService
from gateway.catalog import Catalog
from gateway.errors import ConfigError
from gateway.executor import Executor
from gateway.keys import KeyStore
from gateway.ledger import RedisLedger
from gateway.ledger.guard import LedgerGuard
from gateway.mcp_surface import McpSurface
from gateway.principal import KeyKind
from gateway.settings import AdapterSettings, Settings
from gateway.tool import Tool
from gateway.toolbox import Toolbox
from gateway.worker import Worker

__all__ = ["Gateway", "build_gateway", "create_app", "redis_client", "tools_for"]


def _version() -> str:
    try:
        return version("countersign")
    except PackageNotFoundError:  # running from a source tree without installing
        return "0.0.0"


def redis_client(url: str) -> aioredis.Redis:
    """The gateway's Redis client. Callers own it and must `aclose()` it."""
    return aioredis.from_url(url, decode_responses=False, health_check_interval=30)


def tools_for(settings: Settings) -> list[Tool]:
    """The declared tools of every adapter `settings` enables, in a stable order.

    Raises:
        ConfigError: when an adapter name is not known.
    """
    from adapters import ALWAYS_ON, load_adapter  # adapters import the vocabulary, never this module

    tools: list[Tool] = []
    for name in [*settings.adapters, *sorted(ALWAYS_ON - set(settings.adapters))]:
        try:
            tools.extend(load_adapter(name))
        except LookupError as error:
            raise ConfigError(f"unknown adapter {name!r}") from error
    return tools


def _backend_client(adapter: AdapterSettings) -> httpx.AsyncClient:
    if adapter.url is None:
        raise ConfigError(f"adapter {adapter.name} has no backend URL")
    headers = {"authorization": f"Bearer {adapter.token}"} if adapter.token is not None else {}
    return httpx.AsyncClient(
        base_url=adapter.url,
        headers=headers,
        timeout=httpx.Timeout(adapter.timeout_seconds, connect=2.0),
        transport=AiohttpTransport(limits=httpx.Limits(max_connections=200, max_keepalive_connections=100)),
        follow_redirects=False,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Gateway:
    """The wired parts of one gateway, exposed for the CLI and tests."""

    redis: aioredis.Redis
    keys: KeyStore
    audit: RedisStreamAuditSink
    executor: Executor
    catalog: Catalog
    clients: Mapping[str, httpx.AsyncClient]
    ledger: RedisLedger
    guard: LedgerGuard

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.aclose()
        await self.redis.aclose()


def build_gateway(settings: Settings, tools: Iterable[Tool]) -> Gateway:
    """Wire the layers (no I/O yet: clients connect on first use).

    Raises:
        ConfigError: for an unresolved Redis URL or backend URL.
        ToolDeclarationError: for duplicate tool names.
    """
    if settings.redis_url is None:
        raise ConfigError("settings.redis_url must be resolved before building a gateway")
    toolbox = Toolbox(tools)
    client = redis_client(settings.redis_url)
    audit = RedisStreamAuditSink(client)
    from adapters import ALWAYS_ON

    used = {tool.adapter for tool in toolbox.values()}
    clients = {name: _backend_client(settings.adapters[name]) for name in used if name in settings.adapters}
    missing = used - set(clients) - ALWAYS_ON
    if missing:
        raise ConfigError(f"tools for unconfigured adapter(s): {', '.join(sorted(missing))}")
    grants = settings.grants
    keys = KeyStore(client)
    ledger = RedisLedger(client)
    guard = LedgerGuard(client)
    executor = Executor(
        tools=toolbox,
        grants=grants,
        audit=audit,
        clients=clients,
        ledger=ledger,
        guard=guard,
        keys=keys.get,
        lease_ms=int(settings.lease_seconds * 1000),
    )
    return Gateway(
        redis=client,
        keys=keys,
        audit=audit,
        executor=executor,
        catalog=Catalog(toolbox, grants),
        clients=clients,
        ledger=ledger,
        guard=guard,
    )


@contextlib.asynccontextmanager
async def _worker(gateway: Gateway, *, enabled: bool) -> AsyncIterator[None]:
    """Run the worker beside the app for the app's lifetime."""
    if not enabled:
        yield
        return
    task = asyncio.create_task(Worker(gateway.executor, gateway.ledger).run(), name="countersign-worker")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def create_app(settings: Settings, *, tools: Iterable[Tool] | None = None) -> Starlette:
    """The gateway's ASGI app. `tools` defaults to those of the adapters `settings` enables."""
    declared = list(tools) if tools is not None else tools_for(settings)
    gateway = build_gateway(settings, declared)
    surface = McpSurface(
        catalog=gateway.catalog,
        executor=gateway.executor,
        version=_version(),
        stateless=settings.mcp_stateless,
        allowed_hosts=settings.mcp_allowed_hosts(),
    )
    mcp_endpoint = BearerAuth(surface.asgi, keys=gateway.keys, kind=KeyKind.AGENT, audit=gateway.audit, realm="mcp")
    cards = CardService(gateway.ledger, gateway.audit, writable=gateway.guard.writable)

    async def health(request: Request) -> JSONResponse:
        try:
            await gateway.redis.ping()
        except (RedisError, OSError) as error:
            return JSONResponse({"ok": False, "redis": type(error).__name__}, status_code=503)
        return JSONResponse({"ok": True})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            await gateway.guard.check()  # logs loudly at startup when writes will be refused
            async with surface.session_manager.run(), _worker(gateway, enabled=settings.run_worker):
                yield
        finally:
            await gateway.aclose()

    app = Starlette(
        routes=[
            Route("/mcp", mcp_endpoint, methods=["GET", "POST", "DELETE"]),
            Route("/healthz", health, methods=["GET"]),
            *admin_routes(cards, keys=gateway.keys, audit=gateway.audit),
        ],
        lifespan=lifespan,
    )
    app.state.gateway = gateway
    return app
