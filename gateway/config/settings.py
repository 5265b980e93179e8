"""Settings: one frozen object, read once at the edge and passed down.

`Settings.load(environ, config_path, demo=)` is the only reader of the environment and the config
file; tests build `Settings(...)` directly. The file is parsed by `gateway.config.file` (one
pydantic model per section, unknown keys refused with their path); its ``[adapters]`` and ``[orgs]``
sections become `AdapterSettings` and `OrgSettings` here, and its ``redis_*`` keys one Redis URL.

Two modes. **Demo** (`countersign serve` with no config file and no ``COUNTERSIGN_REDIS_URL``, or
``serve --demo``): the embedded Valkey, the demo backends for adapters without a ``url``, the demo
orgs, demo keys created and printed, and an audit secret generated into the data directory.
**Production** (a config file, ``COUNTERSIGN_REDIS_URL``, or ``COUNTERSIGN_MODE=production`` as in
the Docker image): no demo backend (an adapter without ``url`` is refused by name), no demo key,
no demo org (an absent ``[adapters]`` or ``[orgs]`` is empty), and the audit secret is required.

Environment (prefix ``COUNTERSIGN_``; each wins over the file): ``CONFIG`` (the TOML file, or
``--config``), ``MODE`` (``demo`` or ``production``; unset: decided as above), ``REDIS_URL``,
``DATA_DIR``, ``HOST``, ``PORT``, ``ALLOWED_HOSTS`` and ``ALLOWED_ORIGINS`` (comma-separated),
and ``AUDIT_SECRET`` (the audit chain's key; the variable ``audit_secret_env`` names).

Every key the file may hold, with its default (the README's configuration tables say the same)::

    [gateway]
    host = "127.0.0.1"                 # anything but loopback needs allowed_hosts and allowed_origins
    port = 8765
    redis_url = "redis://..."          # default: the embedded server (also rediss://, redis+sentinel://, redis+cluster://)
    redis_sentinels = ["10.0.0.1:26379", "10.0.0.2:26379"]  # or Sentinel: these sentinels' master
    redis_master_name = "mymaster"     # named so
    redis_cluster_nodes = ["10.0.1.1:6379"]  # or a Redis Cluster, found from these (not with sentinels)
    redis_username = "countersign"     # the ACL user of the master or the cluster
    redis_password_env = "COUNTERSIGN_REDIS_PASSWORD"  # env var holding its password
    redis_tls = false                  # TLS to the master or the cluster nodes
    data_dir = ".countersign"
    allowed_hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]   # Host headers accepted on /mcp (the default)
    allowed_origins = ["https://console.example"]  # Origin headers accepted on /mcp; default: http(s)://<allowed_hosts>
    mcp_stateless = false              # serve the handshake era without sessions
    write_task_support = "optional"    # or "forbidden": a write proposal always answers the card receipt at once
    run_worker = true                  # run the approved-card worker in serve
    key_cache_seconds = 1              # an agent key's revocation takes effect within this
    lease_seconds = 30                 # how long a worker owns a claimed card (> write timeouts + 5 s)
    reconcile_horizon_seconds = 86400  # an UNKNOWN write unsettled this long goes to an admin
    audit_secret_env = "COUNTERSIGN_AUDIT_SECRET"  # env var holding the audit chain's key
    audit_archive_dir = "/var/lib/countersign/audit"  # default: <data_dir>/audit
    policies = "/etc/countersign/policies"  # Cedar policies (a file or a directory); default: the built-in rules
    audit_keep_entries = 10000         # entries kept in Redis; older ones are archived
    audit_keep_minutes = 60            # and none older than this (0: no age limit)
    audit_archive_seconds = 10         # how often serve and worker archive
    card_keep_days = 30                # finished cards older than this leave Redis for the card archive (0: never)
    card_archive_dir = "/var/lib/countersign/cards"  # default: <data_dir>/cards
    card_retention_seconds = 60        # how often serve and worker look for them
    redis_connect_timeout_seconds = 0.5  # a Redis that cannot be reached fails a request this fast
    redis_timeout_seconds = 0.5        # and one that does not answer (503 / LEDGER_UNAVAILABLE)
    log_format = "plain"               # or "json": one object per line (COUNTERSIGN_LOG_FORMAT wins)
    access_log = false                 # a log line per HTTP request (COUNTERSIGN_ACCESS_LOG wins)
    metrics_token_env = "COUNTERSIGN_METRICS_TOKEN"  # env var of the token /metrics requires (unset: loopback only)
    worker_metrics_port = 0            # `countersign worker` serves its metrics on 127.0.0.1:<port> (0: off)
    min_replicas = 0                   # replicas that must confirm each ledger transition (WAITAOF / WAIT)

    [adapters.rooms]
    url = "https://rooms.internal.example"  # omit (demo mode only) to start the demo backend in-process
    token_env = "ROOMS_BACKEND_TOKEN"       # env var holding the gateway's own credential
    signing_key_env = "ROOMS_SIGNING_KEY"   # env var holding the key it signs callers' identity with
    timeout_seconds = 10                    # the backend's deadline per call
    health_path = "/_health"                # polled; an unhealthy backend's reads fail fast

    [orgs.acme]
    adapters = ["rooms", "orders", "expenses"]    # the adapters this org serves, registered ones too
    roles = ["staff", "support", "approver", "registry"]
    tainted_approvals = 1                         # approvers a tainted card needs at least (2: a second one)

    [registry]
    allowed_base_urls = ["http://127.0.0.1:*"]    # base URLs registered adapters may use (fnmatch)

    [limits]                                      # see gateway.limits.budgets
    reads = { per_minute = 1200, burst = 100 }

    [approvals]                                   # see gateway.config.approvals
    repeat_window_seconds = 3600                  # a repeat of a write that succeeded this recently gets its card

    [oauth]                                       # tokens of trusted issuers beside API keys: see the README
    [notifications]                               # webhooks told of cards: see the README
    [audit_export]                                # live export of the audit trail: see the README

An org's ``adapters`` also decide who reviews a registered adapter: the org's admins with the
``registry`` role may accept and remove exactly those (``registry-operator`` may for every one;
see `policies.adapter_authority`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from starlette.config import Config
from starlette.datastructures import Secret

from gateway.audit.formats import AuditExportTarget
from gateway.config.approvals import ApprovalSettings
from gateway.config.console import ConsoleSection
from gateway.config.file import AdapterSection, ConfigFile, GatewaySection, OrgSection, read_config
from gateway.config.oauth import OAuthSection
from gateway.config.org_adapters import OrgAdapters
from gateway.config.redis_target import redis_url_of
from gateway.config.upstreams import UpstreamSection
from gateway.errors import ConfigError
from gateway.limits.budgets import Limits
from gateway.notifications.message import NotificationSettings
from gateway.provenance import HistoryRules

__all__ = ["BUILTIN", "DEMO_ORGS", "LOOPBACK_HOSTS", "AdapterSettings", "OrgSettings", "Settings"]

BUILTIN = Path("builtin")
"""`Settings.policies` for the built-in rules printed as Cedar and decided by it (``policies = "builtin"``)."""

LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
"""The Host headers /mcp accepts when nothing else is configured: the loopback names, any port."""

_DEMO_ROLES = frozenset({"staff", "support", "approver", "registry"})
_DEMO_ADAPTERS = ("rooms", "orders")


@dataclass(frozen=True, kw_only=True, slots=True)
class AdapterSettings:
    """Where one adapter's backend lives and how the gateway authenticates to it."""

    name: str
    url: str | None = None
    """Backend base URL; None means "start the demo backend in-process" (demo mode only)."""
    token: Secret | None = None
    """The gateway's own credential for the backend. Never an agent's token."""
    signing_key: Secret | None = None
    """A key shared with this backend to sign each caller's identity with (``X-Countersign-Identity``,
    HS256): the transition. Without one the identity is signed with the gateway's own keys (EdDSA), which
    the backend verifies with ``/.well-known/jwks.json`` (`gateway.signing.identity`). A demo backend the gateway
    starts itself gets a fresh one."""
    timeout_seconds: float = 10.0
    health_path: str = "/_health"
    """Polled to decide whether the backend is up (an unhealthy backend's reads fail fast)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OrgSettings:
    """One org: the adapters it serves and the roles its keys may hold (``[orgs.<name>]``)."""

    name: str
    adapters: frozenset[str]
    roles: frozenset[str]
    tainted_approvals: int = 1
    """Distinct approvers a card of this org needs at least when it is tainted (`gateway.provenance`)."""


DEMO_ORGS: tuple[OrgSettings, ...] = (
    OrgSettings(name="acme", adapters=frozenset({"rooms", "orders", "expenses"}), roles=_DEMO_ROLES),
    OrgSettings(name="globex", adapters=frozenset({"rooms", "orders", "expenses"}), roles=_DEMO_ROLES),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """Everything the gateway needs to start. Tests build it directly; `load` reads the edge."""

    redis_url: str | None = None
    """External Redis; None starts (or attaches to) the embedded server in `data_dir`."""
    data_dir: Path = Path(".countersign")
    host: str = "127.0.0.1"
    """The address `serve` binds. Beyond loopback it needs `allowed_hosts` and `allowed_origins`."""
    port: int = 8765
    adapters: Mapping[str, AdapterSettings] = field(
        default_factory=lambda: {name: AdapterSettings(name=name) for name in _DEMO_ADAPTERS}
    )
    orgs: tuple[OrgSettings, ...] = DEMO_ORGS
    upstreams: Mapping[str, UpstreamSection] = field(default_factory=dict)
    """``[upstreams.<name>]``: the MCP servers the gateway fronts, with the review of their tools."""
    allowed_hosts: tuple[str, ...] | None = None
    """Host headers accepted on /mcp (DNS-rebinding protection, always on); None: `LOOPBACK_HOSTS`,
    which only a loopback bind may rely on (see `mcp_allowed_hosts`)."""
    allowed_origins: tuple[str, ...] | None = None
    """Origin headers accepted on /mcp (a request without one passes); None: ``http://`` and
    ``https://`` of each allowed host, which only a loopback bind may rely on."""
    mcp_stateless: bool = False
    """Serve the handshake era without sessions (no server-initiated notifications)."""
    write_task_support: Literal["optional", "forbidden"] = "optional"
    """``optional``: a client that asks to follow a write proposal as an MCP task gets a task bound to the
    card, and a client that waits on a task (``tools/call`` returning only once it is done) waits until a
    person decides, up to the card's window. ``forbidden``: every proposal answers the card receipt at
    once, whatever the client asked, and write tools are listed with ``taskSupport: forbidden``; the
    agent follows the card with the approvals tools (`gateway.mcp.tasks`)."""
    run_worker: bool = True
    """Run the approved-card worker inside the gateway process (`countersign worker` runs more)."""
    lease_seconds: float = 30.0
    """How long a worker owns a claimed card; past it another worker recovers the card. It must outlast
    every served write tool's `timeout_seconds` by more than `gateway.tools.toolbox.LEASE_MARGIN_SECONDS`
    (a tool or a registered manifest that does not fit is refused)."""
    reconcile_horizon_seconds: float = 24 * 3600.0
    """How long a write whose outcome is UNKNOWN may stay unsettled, counted from its first send, before
    it is handed to an admin as NEEDS_RECONCILIATION, however often its status query fails meanwhile."""
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Where credential references of registered adapters (``secret_env``) resolve: the environment."""
    registry_allowed_base_urls: tuple[str, ...] = ("http://127.0.0.1:*",)
    """Base URLs registered adapters may use (fnmatch patterns on ``scheme://host:port``)."""
    key_cache_seconds: float = 1.0
    """How long an agent key stays resolved in a gateway process; revocation takes effect within it."""
    demo: bool = False
    """Demo mode (the module docstring says when): demo backends for adapters without a URL, the
    expenses service registering itself by manifest, demo agent, admin and service keys created and
    printed, and an audit secret generated into `data_dir`. False is production: none of these."""
    demo_services: Mapping[str, str] = field(default_factory=dict)
    """Base URLs of demo services started for demo mode (filled in by `gateway.runtime.serve`)."""
    registry_poll_seconds: float = 1.0
    health_poll_seconds: float = 5.0
    audit_secret: Secret | None = None
    """The key of the audit trail's hash chain. None: in demo mode, one generated once and kept in
    ``<data_dir>/audit.secret``; otherwise the gateway refuses to start (`gateway.audit.secret`)."""
    policies: Path | None = None
    """A Cedar policy file or a directory of ``*.cedar`` files that decides access and approvals in place of
    the built-in rules (``COUNTERSIGN_POLICIES`` wins); `BUILTIN` (``"builtin"``): the built-in rules as Cedar,
    regenerated as the catalog changes (``countersign policy show``); None: the built-in rules (`gateway.cedar`)."""
    audit_archive_dir: Path | None = None
    """Where archived audit entries are appended as JSON-lines files; None means ``<data_dir>/audit``.
    Every process that archives one Redis must share it (it and Redis together hold the trail)."""
    audit_keep_entries: int = 10_000
    """The newest entries kept in the Redis stream (about 2 MB); older ones are archived, then trimmed."""
    audit_keep_minutes: float = 60.0
    """Entries older than this are archived and trimmed even among the newest; 0 sets no age limit."""
    audit_archive_seconds: float = 10.0
    """How often `serve` and `worker` archive and trim the stream."""
    card_keep_days: float = 30.0
    """How long a finished card (SUCCEEDED, FAILED, REJECTED, CANCELLED, EXPIRED) stays in Redis after its
    last event; then it is written to the card archive and removed (`gateway.store.ledger.retention`). 0: never."""
    card_archive_dir: Path | None = None
    """Where retired cards are written as JSON-lines files; None means ``<data_dir>/cards``. Every process
    that sweeps one Redis must share it, as for the audit archive."""
    card_retention_seconds: float = 60.0
    """How often `serve` and `worker` look for cards past their retention."""
    redis_connect_timeout_seconds: float = 0.5
    """The longest a Redis connection may take to open; past it the command fails as the store being
    unavailable (a retryable refusal) rather than stalling the request."""
    limits: Limits = field(default_factory=Limits)
    """Per-principal rate budgets and quotas (`gateway.limits.budgets`), from the ``[limits]`` section."""
    approvals: ApprovalSettings = field(default_factory=ApprovalSettings)
    """Policy approvals and repeats of finished writes (`gateway.config.approvals`), from ``[approvals]``."""
    notifications: NotificationSettings = field(default_factory=NotificationSettings)
    """Who is told when a card needs a person (`gateway.notifications.message`), from ``[notifications]``."""
    audit_export: AuditExportTarget | None = None
    """Where new audit entries are posted as they come (`gateway.audit.forwarder`); None: nowhere."""
    oauth: OAuthSection = field(default_factory=OAuthSection)
    console: ConsoleSection = field(default_factory=ConsoleSection)
    """Console sessions and the OpenID provider approvers sign in with (`gateway.config.console`)."""
    console_client_secret: Secret | None = field(default=None, repr=False)
    """The OpenID client's secret, read from ``[console.oidc] client_secret_env``; None: a public client."""
    """The OAuth resource server (`gateway.config.oauth`): trusted issuers; none, API keys only."""
    redis_timeout_seconds: float = 0.5
    """The longest a Redis command may wait for its answer, well under a second on the request path.
    Blocking stream reads get their block plus this (`gateway.store.client.connect`)."""
    log_format: str = "plain"
    """``plain`` (timestamped lines) or ``json`` (one object per line): ``[gateway] log_format`` or
    ``COUNTERSIGN_LOG_FORMAT`` (`gateway.telemetry.logs`)."""
    access_log: bool = False
    """One log line per HTTP request (``countersign.access``): ``[gateway] access_log`` or
    ``COUNTERSIGN_ACCESS_LOG``."""
    metrics_token: Secret | None = field(default=None, repr=False)
    """Bearer token ``/metrics`` requires; None: it answers loopback peers only (`gateway.ops.api`)."""
    worker_metrics_port: int = 0
    """Where `countersign worker` serves its metrics (on 127.0.0.1, no token); 0: nowhere. `serve` has ``/metrics``."""
    min_replicas: int = 0
    """Replicas that must confirm each ledger transition (``WAITAOF 1 <n>``, else ``WAIT <n>``); 0: the
    server alone. Costs a replica's acknowledgement per transition; none while fewer answer."""

    @property
    def archive_dir(self) -> Path:
        return self.audit_archive_dir if self.audit_archive_dir is not None else self.data_dir / "audit"

    @property
    def cards_dir(self) -> Path:
        """The card archive's directory (`card_archive_dir`, else ``<data_dir>/cards``)."""
        return self.card_archive_dir if self.card_archive_dir is not None else self.data_dir / "cards"

    def __post_init__(self) -> None:
        if not self.lease_seconds > 0 or not self.reconcile_horizon_seconds > 0:
            raise ConfigError("lease_seconds and reconcile_horizon_seconds must be positive")
        if self.min_replicas < 0:
            raise ConfigError("min_replicas must not be negative")
        if not self.redis_connect_timeout_seconds > 0 or not self.redis_timeout_seconds > 0:
            raise ConfigError("redis_connect_timeout_seconds and redis_timeout_seconds must be positive")
        clash = set(self.upstreams) & (set(self.adapters) | {"approvals"})
        if clash:
            raise ConfigError(f"upstreams named like an adapter would share its tools' prefix: {sorted(clash)}")
        if not 1 <= self.port <= 65535:
            raise ConfigError(f"port must be between 1 and 65535, not {self.port}")
        if self.log_format not in ("plain", "json"):
            raise ConfigError(f"log_format must be plain or json, not {self.log_format!r}")
        if not self.card_keep_days >= 0 or not self.card_retention_seconds > 0:
            raise ConfigError("card_keep_days must not be negative and card_retention_seconds must be positive")

    @property
    def org_adapters(self) -> OrgAdapters:
        """Adapters per org, plus the built-in approvals tools every configured org gets."""
        return OrgAdapters({org.name: org.adapters | {"approvals"} for org in self.orgs})

    @property
    def history_rules(self) -> HistoryRules:
        """How far a card's provenance looks back, and each org's quorum for tainted cards."""
        return HistoryRules(
            window_seconds=self.limits.provenance_window_seconds,
            taint_seconds=self.limits.taint_seconds,
            max_reads=self.limits.provenance_reads,
            tainted_approvals={org.name: org.tainted_approvals for org in self.orgs},
        )

    def roles_of(self, org: str) -> frozenset[str] | None:
        """Roles configured for `org`, or None when the org is not configured."""
        return next((o.roles for o in self.orgs if o.name == org), None)

    def mcp_allowed_hosts(self) -> list[str]:
        """Host patterns for the SDK's DNS-rebinding check, which is never off.

        Raises:
            ConfigError: the bind address is not loopback and `allowed_hosts` or `allowed_origins`
                is not configured (see `check_exposure`), or `allowed_hosts` is empty.
        """
        self.check_exposure()
        if self.allowed_hosts == ():
            raise ConfigError("allowed_hosts is empty: /mcp would refuse every request; name the gateway's hosts")
        return list(self.allowed_hosts if self.allowed_hosts is not None else LOOPBACK_HOSTS)

    def mcp_allowed_origins(self) -> list[str]:
        """Origin patterns for the same check: the configured ones, or each allowed host's origins.

        Raises:
            ConfigError: as `mcp_allowed_hosts`.
        """
        if self.allowed_origins is not None:
            self.check_exposure()
            return list(self.allowed_origins)
        return [f"{scheme}://{host}" for scheme in ("http", "https") for host in self.mcp_allowed_hosts()]

    def check_exposure(self) -> None:
        """Refuse a bind beyond loopback that relies on the loopback defaults for Host and Origin.

        A gateway reachable from other machines must say by which names (`allowed_hosts`) and from
        which browser origins (`allowed_origins`) it may be called; guessing them from a wildcard
        address would either refuse every client or accept a rebinding attacker's.

        Raises:
            ConfigError: naming both settings and the missing ones.
        """
        if _is_loopback(self.host) or (self.allowed_hosts is not None and self.allowed_origins is not None):
            return
        missing = [
            name
            for name, value in (("allowed_hosts", self.allowed_hosts), ("allowed_origins", self.allowed_origins))
            if value is None
        ]
        raise ConfigError(
            f"binding {self.host} (not loopback) needs [gateway] allowed_hosts and allowed_origins "
            f"(or COUNTERSIGN_ALLOWED_HOSTS and COUNTERSIGN_ALLOWED_ORIGINS): the names and browser origins "
            f"clients reach the gateway by; missing: {', '.join(missing)}"
        )

    @classmethod
    def load(cls, environ: Mapping[str, str], config_path: Path | None = None, *, demo: bool = False) -> Settings:
        """Build settings from the environment and, when given, a TOML config file.

        `demo` is ``serve --demo``: demo mode whatever the file and the environment say.

        Raises:
            ConfigError: for an unreadable or invalid file (each problem named by its key's path), a
                bad environment value (named by its variable), or a `token_env` or `signing_key_env`
                that is not set.
        """
        env = Config(environ=environ, env_prefix="COUNTERSIGN_")
        path = config_path or (Path(p) if (p := env("CONFIG", default="")) else None)
        document = read_config(path) if path else ConfigFile()
        gateway = document.gateway
        deployment = _deployment_url(gateway, environ)
        redis_url = env("REDIS_URL", default=None) or gateway.redis_url or deployment
        is_demo = demo or _mode(env("MODE", default=""), path, env("REDIS_URL", default=None))
        secret_env = gateway.audit_secret_env
        metrics_env = gateway.metrics_token_env
        try:
            return cls(
                redis_url=redis_url,
                data_dir=Path(env("DATA_DIR", default=gateway.data_dir)),
                host=env("HOST", default=gateway.host),
                port=env("PORT", cast=int, default=gateway.port),
                adapters=_adapters_from(document.adapters, environ, demo=is_demo),
                orgs=_orgs_from(document.orgs, demo=is_demo),
                upstreams=dict(document.upstreams),
                allowed_hosts=_patterns(env("ALLOWED_HOSTS", default=None), gateway.allowed_hosts),
                allowed_origins=_patterns(env("ALLOWED_ORIGINS", default=None), gateway.allowed_origins),
                mcp_stateless=gateway.mcp_stateless,
                write_task_support=gateway.write_task_support,
                run_worker=gateway.run_worker,
                demo=is_demo,
                key_cache_seconds=gateway.key_cache_seconds,
                secrets=dict(environ),
                registry_allowed_base_urls=_registry_allowlist(document.registry.allowed_base_urls, demo=is_demo),
                lease_seconds=gateway.lease_seconds,
                reconcile_horizon_seconds=gateway.reconcile_horizon_seconds,
                audit_secret=Secret(environ[secret_env]) if environ.get(secret_env) else None,
                audit_archive_dir=Path(gateway.audit_archive_dir) if gateway.audit_archive_dir else None,
                policies=(BUILTIN if p == "builtin" else Path(p))
                if (p := env("POLICIES", default=gateway.policies or ""))
                else None,
                audit_keep_entries=gateway.audit_keep_entries,
                audit_keep_minutes=gateway.audit_keep_minutes,
                audit_archive_seconds=gateway.audit_archive_seconds,
                card_keep_days=gateway.card_keep_days,
                card_archive_dir=Path(gateway.card_archive_dir) if gateway.card_archive_dir else None,
                card_retention_seconds=gateway.card_retention_seconds,
                redis_connect_timeout_seconds=gateway.redis_connect_timeout_seconds,
                redis_timeout_seconds=gateway.redis_timeout_seconds,
                min_replicas=gateway.min_replicas,
                limits=document.limits,
                approvals=document.approvals,
                oauth=document.oauth,
                console=document.console,
                console_client_secret=_client_secret(document, environ),
                notifications=document.notifications.resolve(environ),
                audit_export=document.audit_export.resolve(environ),
                log_format=env("LOG_FORMAT", default=gateway.log_format),
                access_log=env("ACCESS_LOG", cast=bool, default=gateway.access_log),
                metrics_token=Secret(environ[metrics_env]) if environ.get(metrics_env) else None,
                worker_metrics_port=gateway.worker_metrics_port,
            )
        except ValueError as error:  # starlette's cast of an environment value
            raise ConfigError(f"invalid setting: {error}") from error


def _client_secret(document: ConfigFile, environ: Mapping[str, str]) -> Secret | None:
    """The console's OpenID client secret from the variable ``[console.oidc] client_secret_env`` names.

    Raises:
        ConfigError: the variable is named but not set (a confidential client would fail every sign-in).
    """
    oidc = document.console.oidc
    if oidc is None or oidc.client_secret_env is None:
        return None
    secret = environ.get(oidc.client_secret_env, "")
    if not secret:
        raise ConfigError(f"console.oidc.client_secret_env: {oidc.client_secret_env} is not set")
    return Secret(secret)


def _deployment_url(gateway: GatewaySection, environ: Mapping[str, str]) -> str | None:
    """The URL of the Sentinel or Cluster deployment the ``[gateway] redis_*`` settings name, if any."""
    if gateway.redis_url and (gateway.redis_sentinels or gateway.redis_cluster_nodes):
        raise ConfigError("gateway.redis_url excludes gateway.redis_sentinels and gateway.redis_cluster_nodes")
    password = None
    if gateway.redis_password_env is not None:
        password = environ.get(gateway.redis_password_env)
        if not password:
            raise ConfigError(f"gateway.redis_password_env names {gateway.redis_password_env}, which is not set")
    return redis_url_of(
        sentinels=gateway.redis_sentinels,
        master=gateway.redis_master_name,
        cluster_nodes=gateway.redis_cluster_nodes,
        username=gateway.redis_username,
        password=password,
        tls=gateway.redis_tls,
    )


def _adapters_from(
    section: Mapping[str, AdapterSection] | None, environ: Mapping[str, str], *, demo: bool
) -> dict[str, AdapterSettings]:
    if section is None:
        # The demo's adapters are its own backends; production serves only what it names.
        return {name: AdapterSettings(name=name) for name in _DEMO_ADAPTERS} if demo else {}
    return {
        name: AdapterSettings(
            name=name,
            url=table.url,
            token=_secret(name, table.token_env, environ),
            signing_key=_secret(name, table.signing_key_env, environ),
            timeout_seconds=table.timeout_seconds,
            health_path=table.health_path,
        )
        for name, table in section.items()
    }


def _secret(adapter: str, env_name: str | None, environ: Mapping[str, str]) -> Secret | None:
    if not env_name:
        return None
    if env_name not in environ:
        raise ConfigError(f"adapter {adapter}: environment variable {env_name} is not set")
    return Secret(environ[env_name])


def _orgs_from(section: Mapping[str, OrgSection] | None, *, demo: bool) -> tuple[OrgSettings, ...]:
    if section is None:
        return DEMO_ORGS if demo else ()
    # An org may name adapters that are not configured here: those are registered by manifest
    # and serve nothing until an admin accepts them.
    return tuple(
        OrgSettings(
            name=name,
            adapters=frozenset(table.adapters),
            roles=frozenset(table.roles),
            tainted_approvals=table.tainted_approvals,
        )
        for name, table in section.items()
    )


def _mode(mode: str, path: Path | None, redis_url: str | None) -> bool:
    """Whether the environment asks for demo mode: by ``COUNTERSIGN_MODE``, or by giving nothing."""
    if mode in ("demo", "production"):
        return mode == "demo"
    if mode:
        raise ConfigError(f"COUNTERSIGN_MODE must be demo or production, not {mode!r}")
    return path is None and not redis_url


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _patterns(from_env: str | None, from_file: list[str] | None) -> tuple[str, ...] | None:
    if from_env is not None:
        return tuple(item.strip() for item in from_env.split(",") if item.strip())
    return tuple(from_file) if from_file is not None else None


_DEMO_REGISTRY_ALLOWLIST = ("http://127.0.0.1:*",)
"""Where registered adapters may point when ``[registry] allowed_base_urls`` is unset in demo mode."""


def _registry_allowlist(configured: list[str] | None, *, demo: bool) -> tuple[str, ...]:
    """The operator's allowlist as written; unset, any loopback port in demo mode and nothing in production."""
    if configured is not None:
        return tuple(configured)
    return _DEMO_REGISTRY_ALLOWLIST if demo else ()
