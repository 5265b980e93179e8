"""`countersign serve` and `countersign worker`: check, bind, start, run until a signal, stop everything.

`run(settings)` goes in this order, so that a mistake costs nothing and a stop leaves nothing behind:

1. signals are ours (`gateway.runtime.stopping`): SIGINT or SIGTERM at any later point stops the process
   cleanly, within seconds;
2. checks that need nothing running (`preflight`): a bind beyond loopback names its Host and Origin
   allow-lists, the audit secret is there (production), every adapter has a backend URL
   (production: no demo backend stands in);
3. the listening socket is bound (`listen`): a port in use is one error and exit status 1, before
   any server or backend starts, and "serving" is never printed for a port that is not ours;
4. the Redis URL (``COUNTERSIGN_REDIS_URL``, or the data directory's embedded server, started or
   attached to) and, in demo mode only, the demo backends and the demo keys (`gateway.runtime.demo`);
5. uvicorn on that socket, until a signal; then each resource in reverse order.

Nothing printed carries a credential: demo keys are printed in demo mode only (that is the demo),
backend URLs lose any ``user:password@``, and the Redis URL is never printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
from collections.abc import AsyncIterator
from dataclasses import replace
from urllib.parse import urlsplit, urlunsplit

import uvicorn
from starlette.datastructures import Secret

from gateway.audit.secret import audit_secret
from gateway.cedar.engine import compile_policies
from gateway.cedar.files import read_policy_text
from gateway.config.settings import BUILTIN, AdapterSettings, Settings
from gateway.errors import ConfigError, UpstreamError
from gateway.registry.tools import pinned_tools
from gateway.runtime import demo
from gateway.runtime.app import build_gateway, create_app, policy_reloads, tools_for
from gateway.runtime.background import background_loops
from gateway.runtime.stopping import QuietServer, Stopper
from gateway.runtime.upstreams import fronting
from gateway.runtime.worker import Worker
from gateway.store.client import connect
from gateway.store.embedded import Owner, embedded_redis
from gateway.store.keys import KeyStore
from gateway.store.registrations import RegistryStore
from gateway.store.signing_keys import SigningKeyStore
from gateway.telemetry.logs import LogFormat, configure_logging
from gateway.telemetry.metrics import serve_metrics

__all__ = ["listen", "preflight", "redis_url_for", "resolved", "run", "run_worker"]

LISTEN_BACKLOG = 2048  # uvicorn's default
GRACEFUL_SHUTDOWN_SECONDS = 3


@contextlib.asynccontextmanager
async def redis_url_for(settings: Settings, *, owner: Owner) -> AsyncIterator[str]:
    """The Redis URL to use: the configured one, or the data directory's embedded server."""
    if settings.redis_url is not None:
        yield settings.redis_url
        return
    async with embedded_redis(settings.data_dir, owner=owner) as handle:
        yield handle.url


def preflight(settings: Settings) -> None:
    """Everything `serve` can refuse before it starts anything.

    Raises:
        ConfigError: a bind beyond loopback without ``allowed_hosts`` and ``allowed_origins``, or an
            empty ``allowed_hosts``; no audit secret in production; an adapter without a URL in
            production (naming each).
    """
    # Each raises rather than answer for a configuration it cannot serve safely.
    settings.mcp_allowed_hosts()
    settings.mcp_allowed_origins()
    audit_secret(settings)
    if not settings.demo:
        missing = sorted(name for name, adapter in settings.adapters.items() if adapter.url is None)
        if missing:
            named = f"adapter {missing[0]} has" if len(missing) == 1 else f"adapters {', '.join(missing)} have"
            raise ConfigError(
                f"{named} no url: production mode starts no demo backend; set [adapters.{missing[0]}] url "
                "(or run the demo: countersign serve --demo)"
            )


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port` and listening, for uvicorn to serve on.

    Raises:
        ConfigError: the address is in use or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly, as in `backends.serve`: asyncio sets TCP_NODELAY only on such sockets.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        # As uvicorn does: a restart need not wait for the old connections' TIME_WAIT. It does not
        # let two servers listen on one port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
    except OSError as error:
        sock.close()
        reason = "the address is already in use" if error.errno == errno.EADDRINUSE else str(error)
        raise ConfigError(f"cannot listen on {host}:{port}: {reason}") from error
    return sock


@contextlib.asynccontextmanager
async def resolved(settings: Settings) -> AsyncIterator[Settings]:
    """`settings` with a Redis URL and every adapter's backend URL filled in.

    In demo mode each adapter without a URL gets its demo backend, and the expenses service is
    started too: it is not configured, it registers itself by manifest over HTTP once the gateway
    is up (see `gateway.runtime.demo.register_demo_manifest`), on a stable port so its manifest is the same
    from one start to the next. In production nothing is started but the embedded Redis.

    Raises:
        ConfigError: in production, an adapter without a URL.
    """
    # The demo backends check approval receipts with the gateway's keys, at the address it is about to serve.
    jwks = f"http://{_local_host(settings.host)}:{settings.port}/.well-known/jwks.json" if settings.port else None
    async with contextlib.AsyncExitStack() as stack:
        if settings.demo:
            expenses_port = settings.port + 1 if settings.port < 65535 else 0
            started = await stack.enter_async_context(
                demo.start_backend("expenses", settings.data_dir, port=expenses_port, jwks_url=jwks)
            )
            settings = replace(
                settings,
                secrets={
                    **settings.secrets,
                    "EXPENSES_BACKEND_TOKEN": started.token,
                    "EXPENSES_SIGNING_KEY": started.signing_key,
                },
                demo_services={**settings.demo_services, "expenses": started.url},
            )
        url = await stack.enter_async_context(redis_url_for(settings, owner="serve"))
        adapters: dict[str, AdapterSettings] = {}
        for name, adapter in settings.adapters.items():
            if adapter.url is not None:
                adapters[name] = adapter
                continue
            if not settings.demo:
                raise ConfigError(f"adapter {name} has no url: production mode starts no demo backend")
            backend = await stack.enter_async_context(demo.start_backend(name, settings.data_dir, jwks_url=jwks))
            adapters[name] = replace(
                adapter, url=backend.url, token=Secret(backend.token), signing_key=Secret(backend.signing_key)
            )
        yield replace(settings, redis_url=url, adapters=adapters)


async def run(settings: Settings) -> None:
    """Serve until SIGINT or SIGTERM, in the order of the module docstring.

    Raises:
        ConfigError: from `preflight`, `listen` or the startup; everything started is stopped first.
    """
    configure_logging(_log_format(settings), access_log=settings.access_log)
    with Stopper() as stopper:
        print(f"Countersign is starting in {'demo' if settings.demo else 'production'} mode.", flush=True)
        preflight(settings)
        sock = listen(settings.host, settings.port)
        try:
            with stopper.scope:
                await _serve(settings, sock, stopper)
        finally:
            sock.close()
    print("Countersign stopped.", flush=True)


async def _serve(settings: Settings, sock: socket.socket, stopper: Stopper) -> None:
    async with resolved(settings) as ready:
        if ready.redis_url is None:
            raise ConfigError("no Redis URL could be resolved")
        keys = await _demo_keys(ready, ready.redis_url) if ready.demo else None
        await _policies_valid(ready, ready.redis_url)
        app = create_app(ready)
        server = QuietServer(
            uvicorn.Config(
                app,
                host=ready.host,
                port=ready.port,
                log_level="warning",
                log_config=None,  # uvicorn's records go through the gateway's handler (gateway.telemetry.logs)
                access_log=False,  # the gateway writes its own, without headers (settings.access_log)
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
                lifespan="on",
            )
        )
        stopper.serving(server)
        local = f"http://{_local_host(ready.host)}:{sock.getsockname()[1]}"
        _say_serving(ready, settings, local, keys)
        registration = None
        if keys is not None and "expenses" in ready.demo_services:
            registration = (local, keys.service, ready.demo_services["expenses"])
        announcing = asyncio.create_task(_announce(server, registration))
        try:
            await server.serve(sockets=[sock])
        except SystemExit:  # how uvicorn ends a start its app failed
            if app.refused is None:
                raise
            # Failed on the configuration (a policy set that does not validate against the fronted servers'
            # tools): refused as any other configuration error is, once everything started has stopped.
            raise app.refused from None
        finally:
            announcing.cancel()


async def _policies_valid(ready: Settings, redis_url: str) -> None:
    """A policy file that does not validate against the tools the gateway will serve stops the start here, as one
    error, before anything listens. The tools of fronted MCP servers are known only once they are connected: with
    any configured, the app's own start (`gateway.runtime.app.policy_reloads`) is where such a set is refused, as
    one configuration error too (`GatewayApp.refused`, raised by `_serve`).

    Raises:
        ConfigError: the set cannot be read or does not validate (Cedar's message).
    """
    if ready.policies is None or ready.policies == BUILTIN or ready.upstreams:
        return
    connection = connect(
        redis_url, connect_timeout=ready.redis_connect_timeout_seconds, timeout=ready.redis_timeout_seconds
    )
    try:
        pinned = await RegistryStore(connection.client).pinned()
    finally:
        await connection.aclose()
    served = tools_for(ready)
    served += pinned_tools(pinned, served)
    compile_policies(read_policy_text(ready.policies), served, source=str(ready.policies))


async def _demo_keys(ready: Settings, redis_url: str) -> demo.DemoKeys:
    connection = connect(
        redis_url, connect_timeout=ready.redis_connect_timeout_seconds, timeout=ready.redis_timeout_seconds
    )
    try:
        await demo.ensure_signing_key(SigningKeyStore(connection.client, secret=audit_secret(ready)))
        return await demo.demo_keys(KeyStore(connection.client), ready.data_dir)
    finally:
        await connection.aclose()


def _say_serving(ready: Settings, settings: Settings, local: str, keys: demo.DemoKeys | None) -> None:
    print(f"Countersign is serving MCP at {local}/mcp", flush=True)
    if ready.host != _local_host(ready.host):
        print(f"  listening on {ready.host}; Host headers accepted: {', '.join(ready.mcp_allowed_hosts())}")
    print(f"  redis: {'embedded in ' + str(settings.data_dir) if settings.redis_url is None else 'external'}")
    for name, adapter in ready.adapters.items():
        print(f"  adapter {name}: {_without_credentials(str(adapter.url))}")
    if keys is None:
        print("  keys: none made here; an operator creates them with countersign keys create", flush=True)
        return
    print(f"  demo agent key (demo@acme.example, org acme): {keys.agent}", flush=True)
    print(f"  demo admin key (root@acme.example; approver, registry): {keys.admin}", flush=True)


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
        # The fronted MCP servers too: an approved card of theirs is run (and looked up) through this process's session.
        fronted = contextlib.AsyncExitStack()
        poll = settings.registry_poll_seconds
        await fronted.enter_async_context(
            fronting(
                settings.upstreams,
                gateway.live,
                reviews=gateway.upstream_reviews,
                secrets=settings.secrets,
                poll_seconds=poll,
            )
        )
        try:
            # The policy set this worker re-checks approved cards with follows its files and SIGHUP, as serve's does.
            await fronted.enter_async_context(policy_reloads(gateway.policy))
        except ConfigError:
            await fronted.aclose()
            await gateway.aclose()
            raise
        worker = Worker(gateway.executor.writes, gateway.cards)
        # Its steps' counts and the execution latencies; the shared gauges are the gateways' to report.
        stop_metrics = serve_metrics(settings.worker_metrics_port) if settings.worker_metrics_port else None
        task = asyncio.create_task(worker.run())
        # The identity tokens of its precondition reads and status queries are signed with the keys it holds.
        await gateway.signer.poll()
        background = [
            asyncio.create_task(loop, name=f"countersign {what}")
            for what, loop in background_loops(gateway, settings, serving=False).items()
        ]
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, task.cancel)
        print(f"Countersign worker {worker.name} is running.", flush=True)
        try:
            await task
        except asyncio.CancelledError:
            pass
        finally:
            for running in background:
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            if stop_metrics is not None:
                stop_metrics()
            await fronted.aclose()
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
        outcome = await demo.register_demo_manifest(gateway_url, service_key, expenses_url)
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


def _local_host(host: str) -> str:
    """Where a client on this machine reaches a server bound to `host`."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def _without_credentials(url: str) -> str:
    """`url` without any ``user:password@`` it may carry."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    return urlunsplit(parts._replace(netloc=netloc + (f":{parts.port}" if parts.port else "")))
