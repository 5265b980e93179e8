"""`countersign serve`: resolve the embedded defaults, then run the gateway until Ctrl-C.

Resolution, in order: a Redis URL (`COUNTERSIGN_REDIS_URL`, or the embedded server of the data
directory, started or attached to), a backend URL for every adapter (a configured URL, or the
demo backend started in-process on a free port with a fresh credential and a fresh key to verify the
callers' signed identity with), and a demo agent key
(created once and kept in ``<data_dir>/demo-agent.key``, reused while it is still live).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import uvicorn
from starlette.datastructures import Secret

from backends.expenses import create_expenses_app, expenses_manifest
from backends.serve import QuietServer
from gateway.app import audit_loop, build_gateway, create_app, tools_for
from gateway.errors import ConfigError, UpstreamError
from gateway.logs import LogFormat, configure_logging
from gateway.metrics import serve_metrics
from gateway.principal import KeyKind
from gateway.settings import AdapterSettings, Settings
from gateway.store.client import connect
from gateway.store.embedded import Owner, embedded_redis
from gateway.store.keys import KeyStore
from gateway.upstream_aiohttp import AiohttpUpstream
from gateway.worker import Worker

__all__ = [
    "DEMO_KEY_FILE",
    "ensure_demo_key",
    "redis_url_for",
    "register_demo_manifest",
    "resolved",
    "run",
    "run_worker",
]

DEMO_KEY_FILE = "demo-agent.key"
DEMO_ADMIN_KEY_FILE = "demo-admin.key"
DEMO_SERVICE_KEY_FILE = "demo-service.key"


def _demo_backends() -> dict[str, Callable[..., Any]]:
    from backends.orders import create_orders_app
    from backends.rooms import create_rooms_app

    return {"rooms": create_rooms_app, "orders": create_orders_app}


@contextlib.asynccontextmanager
async def redis_url_for(settings: Settings, *, owner: Owner) -> AsyncIterator[str]:
    """The Redis URL to use: the configured one, or the data directory's embedded server."""
    if settings.redis_url is not None:
        yield settings.redis_url
        return
    async with embedded_redis(settings.data_dir, owner=owner) as handle:
        yield handle.url


@contextlib.asynccontextmanager
async def resolved(settings: Settings) -> AsyncIterator[Settings]:
    """`settings` with a Redis URL and every adapter's backend URL filled in.

    In demo mode the expenses service is started too. It is not configured: it registers itself
    by manifest over HTTP once the gateway is up (see `register_demo_manifest`), on a stable port
    so its manifest is the same from one start to the next.
    """
    from backends.serve import serve_app

    async with contextlib.AsyncExitStack() as stack:
        if settings.demo:
            token, signing_key = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
            expenses = create_expenses_app(service_token=token, signing_key=signing_key)
            base = await stack.enter_async_context(_serve_on_stable_port(expenses, settings.port + 1))
            settings = replace(
                settings,
                secrets={**settings.secrets, "EXPENSES_BACKEND_TOKEN": token, "EXPENSES_SIGNING_KEY": signing_key},
                demo_services={**settings.demo_services, "expenses": base},
            )
        url = await stack.enter_async_context(redis_url_for(settings, owner="serve"))
        factories = _demo_backends()
        adapters: dict[str, AdapterSettings] = {}
        for name, adapter in settings.adapters.items():
            if adapter.url is not None:
                adapters[name] = adapter
                continue
            if name not in factories:
                raise ConfigError(f"adapter {name} has no url and no demo backend")
            # This backend is the gateway's own, so the gateway may make up the key both sides share.
            token, signing_key = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
            backend = factories[name](service_token=token, signing_key=signing_key)
            base = await stack.enter_async_context(serve_app(backend))
            adapters[name] = replace(adapter, url=base, token=Secret(token), signing_key=Secret(signing_key))
        yield replace(settings, redis_url=url, adapters=adapters)


@contextlib.asynccontextmanager
async def _serve_on_stable_port(app: Any, port: int) -> AsyncIterator[str]:
    from backends.serve import serve_app

    try:
        async with serve_app(app, port=port) as base:
            yield base
            return
    except OSError:
        pass  # taken: any free port will do, at the price of a changed manifest (quarantined again)
    async with serve_app(app) as base:
        yield base


async def register_demo_manifest(gateway_url: str, service_key: str, expenses_url: str) -> str:
    """Register the demo expenses service by manifest over HTTP, as any service would."""
    client = AiohttpUpstream(gateway_url, service="registry", credential=service_key)
    manifest = expenses_manifest(expenses_url)
    try:
        answer = await client.request("PUT", "/registry/api/adapters/expenses", json=manifest)
    finally:
        await client.aclose()
    body = answer.json()
    if answer.status not in (200, 202):
        return f"registration refused ({answer.status}): {body}"
    adapter = body["adapter"]
    if adapter["state"] == "active":
        return "registered by manifest; accepted and served"
    return f"registered by manifest; quarantined until accepted (proposed {adapter['proposed_hash']})"


async def ensure_demo_key(
    keys: KeyStore,
    data_dir: Path,
    *,
    file: str = DEMO_KEY_FILE,
    kind: KeyKind = KeyKind.AGENT,
    subject: str = "demo@acme.example",
    roles: tuple[str, ...] = ("staff", "support"),
) -> str:
    """A demo key: the one saved in `data_dir/file` while it is live, else a new one (saved 0600)."""
    path = data_dir / file
    if path.exists():
        token = path.read_text().strip()
        if await keys.resolve(token) is not None:
            return token
    token, _record = await keys.create(kind=kind, subject=subject, org="acme", roles=roles)
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token


async def run(settings: Settings) -> None:
    """Serve until SIGINT or SIGTERM; every resource started here is stopped on the way out.

    The signals are handled here rather than by uvicorn, which would re-raise them after its
    server stopped and so kill the process before the demo backends and the embedded Redis are
    stopped. A second signal forces the HTTP server down without waiting for open connections.
    """
    configure_logging(_log_format(settings), access_log=settings.access_log)
    async with resolved(settings) as ready:
        if ready.redis_url is None:
            raise ConfigError("no Redis URL could be resolved")
        connection = connect(
            ready.redis_url,
            connect_timeout=settings.redis_connect_timeout_seconds,
            timeout=settings.redis_timeout_seconds,
        )
        try:
            store = KeyStore(connection.client)
            demo_key = await ensure_demo_key(store, settings.data_dir)
            if ready.demo:
                admin_key = await ensure_demo_key(store, settings.data_dir, file=DEMO_ADMIN_KEY_FILE,
                                                  kind=KeyKind.ADMIN, subject="root@acme.example",
                                                  roles=("approver", "registry"))  # fmt: skip
                service_key = await ensure_demo_key(store, settings.data_dir, file=DEMO_SERVICE_KEY_FILE,
                                                    kind=KeyKind.SERVICE, subject="expenses-svc", roles=())  # fmt: skip
        finally:
            await connection.aclose()
        app = create_app(ready)
        config = uvicorn.Config(
            app,
            host=ready.host,
            port=ready.port,
            log_level="warning",
            log_config=None,  # uvicorn's records go through the gateway's handler (gateway.logs)
            access_log=False,  # the gateway writes its own, without headers (settings.access_log)
            timeout_graceful_shutdown=3,
            lifespan="on",
        )
        server = QuietServer(config)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, _stop, server)
        shown_host = "127.0.0.1" if ready.host in ("0.0.0.0", "::") else ready.host
        print(f"Countersign is serving MCP at http://{shown_host}:{ready.port}/mcp", flush=True)
        print(f"  redis: {'embedded in ' + str(settings.data_dir) if settings.redis_url is None else 'external'}")
        for name, adapter in ready.adapters.items():
            print(f"  adapter {name}: {adapter.url}")
        print(f"  demo agent key (demo@acme.example, org acme): {demo_key}", flush=True)
        if ready.demo:
            print(f"  demo admin key (root@acme.example; approver, registry): {admin_key}", flush=True)
        demo_registration = None
        if ready.demo and "expenses" in ready.demo_services:
            demo_registration = (f"http://{shown_host}:{ready.port}", service_key, ready.demo_services["expenses"])
        tasks = [asyncio.create_task(_announce(server, demo_registration))]
        try:
            await server.serve()
        finally:
            for task in tasks:
                task.cancel()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
        print("Countersign stopped.", flush=True)


async def run_worker(settings: Settings) -> None:
    """`countersign worker`: the approved-card worker on its own, until SIGINT or SIGTERM.

    Every adapter needs a configured backend URL: demo backends live inside `countersign serve`.

    Raises:
        ConfigError: when an adapter has no URL.
    """
    missing = sorted(name for name, adapter in settings.adapters.items() if adapter.url is None)
    if missing:
        raise ConfigError(f"a separate worker needs backend URLs for: {', '.join(missing)} (see --config)")
    configure_logging(_log_format(settings))
    # A worker is long-running like serve: it owns (or attaches to) the embedded server the same way.
    async with redis_url_for(settings, owner="serve") as url:
        gateway = build_gateway(replace(settings, redis_url=url), tools_for(settings))
        worker = Worker(gateway.executor.writes, gateway.ledger)
        # Its steps' counts and the execution latencies; the shared gauges are the gateways' to report.
        stop_metrics = serve_metrics(settings.worker_metrics_port) if settings.worker_metrics_port else None
        task = asyncio.create_task(worker.run())
        archiving = asyncio.create_task(audit_loop(gateway.archiver, settings))
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, task.cancel)
        print(f"Countersign worker {worker.name} is running.", flush=True)
        try:
            await task
        except asyncio.CancelledError:
            pass
        finally:
            archiving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await archiving
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            if stop_metrics is not None:
                stop_metrics()
            await gateway.aclose()
        print("Countersign worker stopped.", flush=True)


async def _announce(server: uvicorn.Server, demo_registration: tuple[str, str, str] | None) -> None:
    """Once the server listens: say so (scripts wait for this line), then register the demo service."""
    while not server.started:
        await asyncio.sleep(0.05)
    print("Press Ctrl-C to stop.", flush=True)
    if demo_registration is None:
        return
    gateway_url, service_key, expenses_url = demo_registration
    try:
        outcome = await register_demo_manifest(gateway_url, service_key, expenses_url)
    except UpstreamError as error:
        outcome = f"registration failed: {error}"
    print(f"  adapter expenses: {expenses_url} ({outcome})", flush=True)
    if "quarantined" in outcome:
        print(
            "    review and accept it: export COUNTERSIGN_ADMIN_KEY=$(cat .countersign/demo-admin.key);"
            " countersign adapters review; countersign adapters accept expenses --hash <proposed hash>",
            flush=True,
        )


def _log_format(settings: Settings) -> LogFormat:
    return "json" if settings.log_format == "json" else "plain"


def _stop(server: uvicorn.Server) -> None:
    if server.should_exit:
        server.force_exit = True
    server.should_exit = True
