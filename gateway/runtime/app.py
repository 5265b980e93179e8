"""The composition root: the only place that builds Redis clients, HTTP clients and layers.

`create_app(settings, tools=...)` wires one gateway: the key store and audit sink over one Redis
client, one HTTP client per adapter, the executor, the catalog, and the surfaces. `settings`
must be resolved (a Redis URL and a URL for every adapter); `gateway.runtime.serve` resolves the
embedded defaults before it calls this.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from starlette.middleware import Middleware
from starlette.routing import Route

from gateway.admin.api import admin_routes
from gateway.approvals.service import CardService
from gateway.archives.audit_archive import AuditArchive
from gateway.audit.forwarder import AuditForwarder
from gateway.audit.secret import audit_secret
from gateway.auth.oauth_resource import jwks_route, protected_resource_routes
from gateway.auth.tokens import TokenVerifier
from gateway.cards.contract import Ledger
from gateway.cedar.builtin import builtin_text
from gateway.cedar.files import PolicyReloader, file_text
from gateway.config.settings import BUILTIN, AdapterSettings, Settings
from gateway.errors import ConfigError
from gateway.executor import Executor, ReadMemory
from gateway.limits.rate_limiter import AddressBudgets
from gateway.mcp.stack import mcp_endpoint
from gateway.mcp.surface import McpSurface
from gateway.notifications.card_alerts import AlertingLedger
from gateway.notifications.delivery import Notifier
from gateway.notifications.expiry_warnings import ExpiryWarner
from gateway.ops.api import ops_routes
from gateway.ops.health import AdapterHealth
from gateway.outbound.backend_auth import BackendAuth
from gateway.outbound.backend_client import AiohttpUpstream
from gateway.outbound.webhook import WebhookPoster
from gateway.registry.api import adapter_review_table, registry_routes
from gateway.registry.live import LiveToolSource
from gateway.registry.service import RegistryService
from gateway.runtime.approvers import approvers
from gateway.runtime.background import audit_archiver, background_loops, card_retention
from gateway.runtime.upstreams import fronting
from gateway.runtime.worker import Worker
from gateway.signing.identity import IdentityHeaders
from gateway.signing.signer import Signer
from gateway.store.audit_archiver import AuditArchiver
from gateway.store.audit_export import AuditExportCursor
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.audit_trail import AuditTrail
from gateway.store.call_history import RedisCallHistory
from gateway.store.client import Connection, connect
from gateway.store.durability import LedgerGuard
from gateway.store.keys import KeyCache, KeyStore
from gateway.store.ledger.redis_ledger import RedisLedger
from gateway.store.ledger.retention import RedisCardRetention
from gateway.store.notification_outbox import RedisNotificationOutbox
from gateway.store.rate_buckets import RedisRateLimiter
from gateway.store.registrations import RegistryStore
from gateway.store.signing_keys import SigningKeyStore
from gateway.store.upstream_reviews import UpstreamReviewStore
from gateway.store.view_handles import RedisViewHandles
from gateway.tools.catalog import Catalog
from gateway.tools.declarations import Tool
from gateway.tools.toolbox import Toolbox
from gateway.tools.upstream import UpstreamClient
from gateway.upstreams.api import upstream_registration_routes, upstream_review_table
from gateway.upstreams.tool_reviews import UpstreamReviews
from gateway.web.console import console_routes
from gateway.web.request_telemetry import HttpTelemetry
from gateway.web.root_app import GatewayApp

__all__ = [
    "Gateway",
    "backend_client",
    "build_gateway",
    "create_app",
    "policy_reloads",
    "tools_for",
]

logger = logging.getLogger(__name__)


def _version() -> str:
    try:
        return version("countersign")
    except PackageNotFoundError:  # running from a source tree without installing
        return "0.0.0"


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


def _backend_client(adapter: AdapterSettings) -> AiohttpUpstream:
    if adapter.url is None:
        raise ConfigError(f"adapter {adapter.name} has no backend URL")
    credential = str(adapter.token) if adapter.token is not None else None
    return AiohttpUpstream(
        adapter.url, service=adapter.name, credential=credential, timeout_seconds=adapter.timeout_seconds
    )


def backend_client(url: str, credential: BackendAuth | None, *, timeout_seconds: float = 10.0) -> AiohttpUpstream:
    """The gateway's client for one backend: its own credential, never an agent's token."""
    return AiohttpUpstream(url, service=url, credential=credential, timeout_seconds=timeout_seconds)


@dataclass(frozen=True, kw_only=True, slots=True)
class Gateway:
    """The wired parts of one gateway, exposed for the CLI and tests."""

    redis: Connection
    keys: KeyStore
    audit: RedisStreamAuditSink
    executor: Executor
    catalog: Catalog
    clients: Mapping[str, UpstreamClient]
    ledger: RedisLedger
    guard: LedgerGuard
    live: LiveToolSource
    health: AdapterHealth
    registry: RegistryService
    archiver: AuditArchiver
    retention: RedisCardRetention
    """Moves finished cards past `Settings.card_keep_days` from Redis to the card archive."""
    cards: Ledger
    """`ledger` as the executor and the worker move cards: with notifications when any are configured."""
    notifier: Notifier | None
    """Delivers notifications; None when no webhook is configured."""
    warner: ExpiryWarner | None
    """Announces cards about to expire undecided; None when no webhook hears of them."""
    poster: WebhookPoster
    forwarder: AuditForwarder | None
    """Posts new audit entries to ``[audit_export]``; None when no URL is configured."""
    signer: Signer
    """The gateway's signing keys: identity tokens, approval receipts, the JWKS."""
    upstream_reviews: UpstreamReviews
    """The reviews of fronted MCP servers' tools in force, and the admins' review of them."""
    policy: PolicyReloader | None = None
    """The operator's Cedar policy set and its reloading; None: the built-in rules decide."""

    def policy_status(self) -> dict[str, Any]:
        """Which policy set is in force, for ``/readyz``: ``builtin``, or the set's name (and a refused newer one)."""
        if self.policy is None:
            return {"active": "builtin"}
        status: dict[str, Any] = {"active": self.policy.engine.active}
        if self.policy.last_error is not None:
            status["refused"] = self.policy.last_error
        return status

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.aclose()
        await self.poster.aclose()
        await self.redis.aclose()


def build_gateway(settings: Settings, tools: Iterable[Tool]) -> Gateway:
    """Wire the layers (no I/O yet: clients connect on first use).

    Raises:
        ConfigError: for an unresolved Redis URL or backend URL, or no audit secret in production.
        ToolDeclarationError: for duplicate tool names, or a write tool whose timeout the worker
            lease (`settings.lease_seconds`) does not outlast by `LEASE_MARGIN_SECONDS`.
    """
    if settings.redis_url is None:
        raise ConfigError("settings.redis_url must be resolved before building a gateway")
    static = list(tools)
    # Refuses duplicate names, and writes that could outlast the lease, before anything connects.
    toolbox = Toolbox(static, lease_seconds=settings.lease_seconds)
    connection = connect(
        settings.redis_url,
        connect_timeout=settings.redis_connect_timeout_seconds,
        timeout=settings.redis_timeout_seconds,
    )
    client = connection.client
    from adapters import ALWAYS_ON

    used = {tool.adapter for tool in toolbox.values()}
    clients: dict[str, UpstreamClient] = {
        name: _backend_client(settings.adapters[name]) for name in used if name in settings.adapters
    }
    # An upstream MCP server's tools reach it through their own supervised session, not an HTTP client.
    missing = used - set(clients) - ALWAYS_ON - set(settings.upstreams)
    if missing:
        raise ConfigError(f"tools for unconfigured adapter(s): {', '.join(sorted(missing))}")
    health_paths = {name: settings.adapters[name].health_path for name in clients}
    health_intervals: dict[str, float] = {}  # a registered adapter's own; configured ones are polled every time
    org_adapters = settings.org_adapters
    keys = KeyStore(client)
    guard = LedgerGuard(client)
    # Each transition's durability verdict also updates the guard, so a flip is seen by the next pre-check.
    ledger = RedisLedger(
        client,
        blocking=connection.blocking,
        blocking_slack=connection.timeout,
        fsync_timeout_ms=int(connection.timeout * 500),
        on_verdict=guard.observe,
        limits=settings.limits,
        min_replicas=settings.min_replicas,
        repeat_window_ms=settings.approvals.repeat_window_ms,
    )
    notify = settings.notifications
    outbox = RedisNotificationOutbox(client)
    # Without a webhook the ledger is used as it is: nothing on the proposal path to pay for.
    alerting = AlertingLedger(ledger, queue=outbox, webhooks=notify.webhooks, console_url=notify.console_url)
    cards: Ledger = alerting if notify.webhooks else ledger
    secret = audit_secret(settings)
    # The key set's private halves are encrypted with the audit secret, which every process on one Redis shares.
    signer = Signer(SigningKeyStore(client, secret=secret))
    # A shared HS256 key, where an adapter still has one, is the transition; the others verify with the JWKS.
    shared = {name: str(settings.adapters[name].signing_key or "") for name in clients}
    identity = IdentityHeaders({name: key for name, key in shared.items() if key}, signer=signer)
    audit = RedisStreamAuditSink(client, secret=secret)
    history = RedisCallHistory(client, audit=audit)  # a read's history write goes in its audit append
    archiver = audit_archiver(client, settings)
    store = RegistryStore(client)
    live = LiveToolSource(
        static=static,
        store=store,
        clients=clients,
        make_client=backend_client,
        secrets=settings.secrets,
        identity=identity,
        health_paths=health_paths,
        health_intervals=health_intervals,
        lease_seconds=settings.lease_seconds,
    )
    health = AdapterHealth(clients, health_paths, intervals=health_intervals)
    registry = RegistryService(
        store,
        audit,
        allowed_base_urls=settings.registry_allowed_base_urls,
        served_tool_names=lambda: frozenset(live.current()),
        refresh=live.refresh,
        lease_seconds=settings.lease_seconds,
        org_adapters=org_adapters,
    )
    upstream_reviews = UpstreamReviews(
        settings.upstreams,
        UpstreamReviewStore(client),
        audit,
        org_adapters=org_adapters,
        now_ms=lambda: int(time.time() * 1000),
        served_tool_names=lambda: frozenset(live.current()),
        allowed_base_urls=settings.registry_allowed_base_urls,
    )
    # The operator's policies are validated against the schema of the tools served: first the in-process ones, then
    # (`policy_reloads`, once the store is read and the fronted servers listed) every tool served, a set that does
    # not validate then stopping the start (there is no earlier set to keep), and again whenever the catalog changes.
    engine, reloader = None, None
    if settings.policies is not None:
        if settings.policies == BUILTIN:
            text, source = builtin_text(settings.approvals.policies, settings.oauth.scopes_for), "builtin"
        else:
            text, source = file_text(settings.policies), str(settings.policies)
        reloader = PolicyReloader.starting(text, source, static, lambda: live.current().values())
        engine = reloader.engine
        # The set follows the catalog wherever the tools come from (registered adapters, fronted MCP servers), in
        # every process that decides: `serve` and a separate `worker` alike.
        live.on_change(_reload_policies(reloader))
    executor = Executor.build(
        tools=live,
        org_adapters=org_adapters,
        policy=engine,
        audit=audit,
        clients=clients,
        identity=identity,
        ledger=cards,
        guard=guard,
        live_principal=keys.live_principal,
        subject_revoked=keys.subject_revoked,
        healthy=health.healthy,
        limiter=RedisRateLimiter(client),
        limits=settings.limits,
        memory=ReadMemory(history, settings.history_rules, audited=history),
        lease_ms=int(settings.lease_seconds * 1000),
        reconcile_horizon_ms=int(settings.reconcile_horizon_seconds * 1000),
        approvals=settings.approvals,
        announce=alerting.alert,
        receipts=signer.receipts_for,
        handles=RedisViewHandles(client),
    )
    poster = WebhookPoster(timeout_seconds=notify.timeout_seconds)
    notifier = Notifier.configured(outbox, notify, poster, audit) if notify.webhooks else None
    warner = ExpiryWarner.configured(cards, outbox, notify)
    trail, exporting = AuditTrail(audit, AuditArchive(settings.archive_dir)), settings.audit_export
    forwarder = (
        AuditForwarder(trail, AuditExportCursor(client), exporting, poster, product_version=_version())
        if exporting
        else None
    )
    return Gateway(
        redis=connection,
        keys=keys,
        audit=audit,
        executor=executor,
        catalog=Catalog(live, org_adapters, engine),
        clients=clients,
        ledger=ledger,
        guard=guard,
        live=live,
        health=health,
        registry=registry,
        archiver=archiver,
        retention=card_retention(client, settings, audit),
        cards=cards,
        notifier=notifier,
        warner=warner,
        poster=poster,
        forwarder=forwarder,
        signer=signer,
        upstream_reviews=upstream_reviews,
        policy=reloader,
    )


@contextlib.asynccontextmanager
async def _background(gateway: Gateway, settings: Settings, workers: list[asyncio.Task[None]]) -> AsyncIterator[None]:
    """The live tool source's refresh, the health checks, the audit archive, the card retention, notification
    delivery and the live audit export (when configured), and (by default) the worker, whose task joins `workers`."""
    tasks = [
        asyncio.create_task(loop, name=f"countersign {what}")
        for what, loop in background_loops(gateway, settings, serving=True).items()
    ]
    if settings.run_worker:
        tasks.append(
            asyncio.create_task(Worker(gateway.executor.writes, gateway.cards).run(), name="countersign-worker")
        )
        workers.append(tasks[-1])
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _config_error(error: BaseException) -> ConfigError | None:
    """`error` if it is a configuration error, else the first one of an exception group, however deep the task
    groups nested it; None when there is none."""
    if isinstance(error, ConfigError):
        return error
    if isinstance(error, BaseExceptionGroup):
        return next((found for inner in error.exceptions if (found := _config_error(inner)) is not None), None)
    return None


def _reload_policies(reloader: PolicyReloader) -> Callable[[], Awaitable[None]]:
    async def reload() -> None:
        reloader.reload()

    return reload


@contextlib.asynccontextmanager
async def policy_reloads(reloader: PolicyReloader | None) -> AsyncIterator[None]:
    """While serving: the policy set is loaded again on SIGHUP, and when its files change (checked each second).

    Raises:
        ConfigError: on entry, the set does not validate against the tools served now and none is in force.
    """
    if reloader is None:
        yield
        return
    reloader.reload(force=True)  # against the tools served now, registered and fronted ones included
    if reloader.held:
        raise ConfigError(f"no policy set in force: {reloader.last_error}")
    loop = asyncio.get_running_loop()
    # Signal handlers belong to the main thread: a gateway served from another one (tests) relies on the poll.
    main = threading.current_thread() is threading.main_thread()
    hup = getattr(signal, "SIGHUP", None) if main else None
    if hup is not None:
        loop.add_signal_handler(hup, lambda: reloader.reload(force=True))

    async def watch() -> None:
        while True:
            await asyncio.sleep(1.0)
            reloader.reload()

    task = asyncio.create_task(watch(), name="countersign policy reload")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if hup is not None:
            loop.remove_signal_handler(hup)


def create_app(settings: Settings, *, tools: Iterable[Tool] | None = None, views: bool = True) -> GatewayApp:
    """The gateway's ASGI app (a Starlette app that serves ``/mcp`` directly: `gateway.web.root_app`). `tools`
    defaults to those of the adapters `settings` enables. Without `views`, the MCP surface serves no MCP Apps
    view, to any client: what every client got before views existed (the views' tests compare the two)."""
    declared = list(tools) if tools is not None else tools_for(settings)
    gateway = build_gateway(settings, declared)
    surface = McpSurface(
        catalog=gateway.catalog,
        executor=gateway.executor.agent,
        tasks=gateway.executor.tasks,
        views=gateway.executor.views if views else None,
        console_url=settings.notifications.console_url,
        version=_version(),
        stateless=settings.mcp_stateless,
        write_task_support=settings.write_task_support,
        catalog_ttl_ms=int(settings.registry_poll_seconds * 1000),
        audit=gateway.audit,
        sessions_per_key=settings.limits.sessions_per_key,
        session_idle_seconds=settings.limits.session_idle_seconds,
    )
    # After the policy set's own listener (`build_gateway`): a session told of new tools and listing at once is
    # answered by the set validated against (and, for the built-in rules, written for) them.
    gateway.live.on_change(surface.tools_changed)
    # Agents' keys are resolved through a one-second cache: the MCP path is the hot one. Admin and
    # registry keys are looked up on every request, so their revocation is immediate.
    agent_keys = KeyCache(gateway.keys, ttl_seconds=settings.key_cache_seconds)
    # One table of failed authentications per client address for every surface of this process: it is
    # consulted before any key lookup, so a flood of bad keys costs no Redis round trip (gateway.auth.bearer).
    floods = AddressBudgets(settings.limits.unauthenticated)
    oauth = TokenVerifier(settings.oauth)  # OAuth tokens beside keys; none is taken until an issuer is configured
    # Every layer in front of the MCP SDK, in order (gateway.mcp.stack).
    mcp = mcp_endpoint(
        surface,
        keys=agent_keys,
        tokens=oauth,
        floods=floods,
        audit=gateway.audit,
        allowed_hosts=settings.mcp_allowed_hosts(),
        allowed_origins=settings.mcp_allowed_origins(),
    )
    # The service of the admin API and the console: they follow every card's changes on the ledger's channel.
    # Approvers as people: console sessions through the OpenID provider, and passkeys (gateway.runtime.approvers).
    people = approvers(settings, gateway.redis, gateway.audit, floods)
    cards = CardService(
        gateway.ledger,
        gateway.audit,
        writable=gateway.guard.writable,
        changes=gateway.ledger.changes,
        batch_limit=settings.limits.batch_decisions,
        passkeys=people.passkeys,
        require_passkey=settings.approvals.require_passkey,
    )
    adapter_review = adapter_review_table(gateway.registry, audit=gateway.audit)
    upstream_review = upstream_review_table(gateway.upstream_reviews)

    workers: list[asyncio.Task[None]] = []
    running = (lambda: bool(workers) and not workers[0].done()) if settings.run_worker else None
    ops = [
        *ops_routes(
            redis=gateway.redis,
            guard=gateway.guard,
            adapters=gateway.health,
            audit=gateway.audit,
            archive_dir=settings.archive_dir,
            metrics_token=settings.metrics_token,
            worker_running=running,
            policies=gateway.policy_status,
        ),
        *protected_resource_routes(settings.oauth),
        jwks_route(gateway.signer),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: GatewayApp) -> AsyncIterator[None]:
        started = False
        try:
            await gateway.guard.check()  # logs loudly at startup when writes will be refused
            await gateway.live.refresh()
            await gateway.signer.poll()  # backends' identity tokens are signed from the first request on
            # The fronted MCP servers first: an approved card of theirs finds its tool when the worker starts.
            upstreams = fronting(
                settings.upstreams,
                gateway.live,
                reviews=gateway.upstream_reviews,
                secrets=settings.secrets,
                poll_seconds=settings.registry_poll_seconds,
            )
            async with (
                surface.run(),
                upstreams,
                # The set in force before the worker re-checks any approved card with it.
                policy_reloads(gateway.policy),
                _background(gateway, settings, workers),
            ):
                started = True
                yield
        except (ConfigError, BaseExceptionGroup) as error:  # grouped when raised inside the fronted servers' tasks
            refused = _config_error(error)
            if refused is not None and not started:
                app.refuse_start(refused)  # `serve` raises it as one message
            raise
        finally:
            await gateway.aclose()

    app = GatewayApp(
        fast_path="/mcp",
        routes=[
            Route("/mcp", mcp, methods=["GET", "POST", "DELETE"]),
            *ops,
            # Before the registry's own mount, which would answer every path under /registry/api.
            *upstream_registration_routes(
                gateway.upstream_reviews, keys=gateway.keys, audit=gateway.audit, floods=floods
            ),
            *registry_routes(gateway.registry, keys=gateway.keys, audit=gateway.audit, floods=floods),
            *admin_routes(
                cards,
                oauth,
                keys=gateway.keys,
                audit=gateway.audit,
                tables=[adapter_review, upstream_review, people.passkey_routes],
                floods=floods,
                backends=gateway.health.report,
                sessions=people.guard,
            ),
            *people.routes,
            *console_routes(),
        ],
        lifespan=lifespan,
        # Around every route, /mcp's direct one too (outside its stack): a span per admin and registry request,
        # and the access log (gateway.web.request_telemetry).
        middleware=[Middleware(HttpTelemetry)],
    )
    app.state.gateway = gateway
    app.state.mcp = surface
    return app
