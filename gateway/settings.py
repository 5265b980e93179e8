"""Settings: one frozen object, read once at the edge and passed down.

`Settings.load(environ, config_path)` is the only reader of the environment and the config file.
Environment (prefix ``COUNTERSIGN_``): ``REDIS_URL`` (default: the embedded server),
``DATA_DIR`` (default ``./.countersign``), ``HOST``, ``PORT``, ``CONFIG`` (a TOML file),
``AUDIT_SECRET`` (the key of the audit trail's hash chain; required with a config file).

The TOML file names adapters, their backend URLs, and orgs with their adapters and roles::

    [gateway]
    host = "127.0.0.1"
    port = 8765
    allowed_hosts = ["127.0.0.1:*", "localhost:*"]   # Host headers accepted on /mcp
    lease_seconds = 30                            # how long a worker owns a claimed card (> write timeouts + 5 s)
    reconcile_horizon_seconds = 86400             # an UNKNOWN write unsettled this long goes to an admin
    audit_secret_env = "COUNTERSIGN_AUDIT_SECRET"  # env var holding the audit chain's key (the default)
    audit_archive_dir = "/var/lib/countersign/audit" # default: <data_dir>/audit
    audit_keep_entries = 10000                    # entries kept in Redis; older ones are archived
    audit_keep_minutes = 60                       # and none older than this (0: no age limit)
    redis_connect_timeout_seconds = 0.5           # a Redis that cannot be reached fails a request this fast
    redis_timeout_seconds = 0.5                   # and one that does not answer (503 / LEDGER_UNAVAILABLE)
    log_format = "json"                           # or "plain" (default); COUNTERSIGN_LOG_FORMAT overrides
    access_log = true                             # one line per HTTP request; COUNTERSIGN_ACCESS_LOG overrides
    metrics_token_env = "COUNTERSIGN_METRICS_TOKEN" # env var holding the token /metrics requires (unset: loopback only)
    worker_metrics_port = 9465                    # `countersign worker` serves its metrics here, on 127.0.0.1 (0: off)

    [adapters.rooms]
    url = "https://rooms.internal.example"        # omit to start the demo backend in-process
    token_env = "ROOMS_BACKEND_TOKEN"             # env var holding the gateway's own credential
    signing_key_env = "ROOMS_SIGNING_KEY"         # env var holding the key it signs callers' identity with

    [orgs.acme]
    adapters = ["rooms", "orders", "expenses"]    # the adapters this org serves, registered ones too
    roles = ["staff", "support", "approver", "registry"]

An org's ``adapters`` also decide who reviews a registered adapter: the org's admins with the
``registry`` role may accept and remove exactly those (``registry-operator`` may for every one;
see `policies.adapter_authority`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.config import Config
from starlette.datastructures import Secret

from gateway.errors import ConfigError
from gateway.limits import Limits
from gateway.org_adapters import OrgAdapters

__all__ = ["DEMO_ORGS", "AdapterSettings", "OrgSettings", "Settings"]

_DEMO_ROLES = frozenset({"staff", "support", "approver", "registry"})


@dataclass(frozen=True, kw_only=True, slots=True)
class AdapterSettings:
    """Where one adapter's backend lives and how the gateway authenticates to it."""

    name: str
    url: str | None = None
    """Backend base URL; None means "start the demo backend in-process" (demo mode only)."""
    token: Secret | None = None
    """The gateway's own credential for the backend. Never an agent's token."""
    signing_key: Secret | None = None
    """The key the gateway signs each caller's identity with for this backend (``X-Countersign-Identity``,
    HS256), shared with the backend, which verifies it. Required for a backend with a `url`: the gateway
    refuses to start without one (it never invents a key a backend could not know). A demo backend the
    gateway starts itself gets a fresh one."""
    timeout_seconds: float = 10.0
    health_path: str = "/_health"
    """Polled to decide whether the backend is up (an unhealthy backend's reads fail fast)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OrgSettings:
    name: str
    adapters: frozenset[str]
    roles: frozenset[str]


DEMO_ORGS: tuple[OrgSettings, ...] = (
    OrgSettings(name="acme", adapters=frozenset({"rooms", "orders", "expenses"}), roles=_DEMO_ROLES),
    OrgSettings(name="globex", adapters=frozenset({"rooms", "orders", "expenses"}), roles=_DEMO_ROLES),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """Everything the gateway needs to start. Tests build it directly."""

    redis_url: str | None = None
    """External Redis; None starts (or attaches to) the embedded server in `data_dir`."""
    data_dir: Path = Path(".countersign")
    host: str = "127.0.0.1"
    port: int = 8765
    adapters: Mapping[str, AdapterSettings] = field(
        default_factory=lambda: {name: AdapterSettings(name=name) for name in ("rooms", "orders")}
    )
    orgs: tuple[OrgSettings, ...] = DEMO_ORGS
    allowed_hosts: tuple[str, ...] | None = None
    """Host headers accepted on /mcp (DNS-rebinding protection); None derives them from `host`."""
    mcp_stateless: bool = False
    """Serve the handshake era without sessions (no server-initiated notifications)."""
    run_worker: bool = True
    """Run the approved-card worker inside the gateway process (`countersign worker` runs more)."""
    lease_seconds: float = 30.0
    """How long a worker owns a claimed card; past it another worker recovers the card. It must outlast
    every served write tool's `timeout_seconds` by more than `gateway.toolbox.LEASE_MARGIN_SECONDS`
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
    """Demo mode (`countersign serve` without a config file): also start the expenses service, which
    registers itself by manifest, and create demo admin and service keys."""
    demo_services: Mapping[str, str] = field(default_factory=dict)
    """Base URLs of demo services started for demo mode (filled in by `gateway.serve`)."""
    registry_poll_seconds: float = 1.0
    health_poll_seconds: float = 5.0
    audit_secret: Secret | None = None
    """The key of the audit trail's hash chain. None: in demo mode, one generated once and kept in
    ``<data_dir>/audit.secret``; otherwise the gateway refuses to start (`gateway.audit_secret`)."""
    audit_archive_dir: Path | None = None
    """Where archived audit entries are appended as JSON-lines files; None means ``<data_dir>/audit``.
    Every process that archives one Redis must share it (it and Redis together hold the trail)."""
    audit_keep_entries: int = 10_000
    """The newest entries kept in the Redis stream (about 2 MB); older ones are archived, then trimmed."""
    audit_keep_minutes: float = 60.0
    """Entries older than this are archived and trimmed even among the newest; 0 sets no age limit."""
    audit_archive_seconds: float = 10.0
    """How often `serve` and `worker` archive and trim the stream."""
    redis_connect_timeout_seconds: float = 0.5
    """The longest a Redis connection may take to open; past it the command fails as the store being
    unavailable (a retryable refusal) rather than stalling the request."""
    limits: Limits = field(default_factory=Limits)
    """Per-principal rate budgets and quotas (`gateway.limits`), from the ``[limits]`` section."""
    redis_timeout_seconds: float = 0.5
    """The longest a Redis command may wait for its answer, well under a second on the request path.
    Blocking stream reads get their block plus this (`gateway.store.client.connect`)."""
    log_format: str = "plain"
    """``plain`` (timestamped lines) or ``json`` (one object per line): ``[gateway] log_format`` or
    ``COUNTERSIGN_LOG_FORMAT`` (`gateway.logs`)."""
    access_log: bool = False
    """One log line per HTTP request (``countersign.access``): ``[gateway] access_log`` or
    ``COUNTERSIGN_ACCESS_LOG``."""
    metrics_token: Secret | None = field(default=None, repr=False)
    """Bearer token ``/metrics`` requires; None: it answers loopback peers only (`gateway.ops_api`)."""
    worker_metrics_port: int = 0
    """Where `countersign worker` serves its metrics (on 127.0.0.1, no token); 0: nowhere. `serve` has ``/metrics``."""

    @property
    def archive_dir(self) -> Path:
        return self.audit_archive_dir if self.audit_archive_dir is not None else self.data_dir / "audit"

    def __post_init__(self) -> None:
        if not self.lease_seconds > 0 or not self.reconcile_horizon_seconds > 0:
            raise ConfigError("lease_seconds and reconcile_horizon_seconds must be positive")
        if not self.redis_connect_timeout_seconds > 0 or not self.redis_timeout_seconds > 0:
            raise ConfigError("redis_connect_timeout_seconds and redis_timeout_seconds must be positive")
        if self.log_format not in ("plain", "json"):
            raise ConfigError(f"log_format must be plain or json, not {self.log_format!r}")

    @property
    def org_adapters(self) -> OrgAdapters:
        """Adapters per org, plus the built-in approvals tools every configured org gets."""
        return OrgAdapters({org.name: org.adapters | {"approvals"} for org in self.orgs})

    def roles_of(self, org: str) -> frozenset[str] | None:
        """Roles configured for `org`, or None when the org is not configured."""
        return next((o.roles for o in self.orgs if o.name == org), None)

    def mcp_allowed_hosts(self) -> list[str] | None:
        """Host patterns for the SDK's DNS-rebinding check; None disables it (wildcard bind)."""
        if self.allowed_hosts is not None:
            return list(self.allowed_hosts)
        if self.host in ("127.0.0.1", "localhost", "::1"):
            return ["127.0.0.1:*", "localhost:*", "[::1]:*"]
        return None

    @classmethod
    def load(cls, environ: Mapping[str, str], config_path: Path | None = None) -> Settings:
        """Build settings from the environment and, when given, a TOML config file.

        Raises:
            ConfigError: for an unreadable file, an unknown section, an org naming an adapter that
                is not configured, or a `token_env` or `signing_key_env` that is not set.
        """
        env = Config(environ=environ, env_prefix="COUNTERSIGN_")
        path = config_path or (Path(p) if (p := env("CONFIG", default="")) else None)
        document = _read_toml(path) if path else {}
        unknown = set(document) - {"gateway", "adapters", "orgs", "registry", "limits"}
        if unknown:
            raise ConfigError(f"unknown config section(s): {', '.join(sorted(unknown))}")
        gateway = document.get("gateway", {})
        adapters = _adapters(document.get("adapters"), environ)
        orgs = _orgs(document.get("orgs"))
        allowed = gateway.get("allowed_hosts")
        secret_env = gateway.get("audit_secret_env", "COUNTERSIGN_AUDIT_SECRET")
        archive_dir = gateway.get("audit_archive_dir")
        metrics_env = gateway.get("metrics_token_env", "COUNTERSIGN_METRICS_TOKEN")
        try:
            return cls(
                redis_url=env("REDIS_URL", default=None) or gateway.get("redis_url"),
                data_dir=Path(env("DATA_DIR", default=gateway.get("data_dir", ".countersign"))),
                host=env("HOST", default=gateway.get("host", "127.0.0.1")),
                port=env("PORT", cast=int, default=gateway.get("port", 8765)),
                adapters=adapters,
                orgs=orgs,
                allowed_hosts=tuple(allowed) if allowed is not None else None,
                mcp_stateless=bool(gateway.get("mcp_stateless", False)),
                run_worker=bool(gateway.get("run_worker", True)),
                demo=path is None,
                key_cache_seconds=float(gateway.get("key_cache_seconds", 1.0)),
                secrets=dict(environ),
                registry_allowed_base_urls=tuple(
                    document.get("registry", {}).get("allowed_base_urls", ("http://127.0.0.1:*",))
                ),
                lease_seconds=float(gateway.get("lease_seconds", 30.0)),
                reconcile_horizon_seconds=float(gateway.get("reconcile_horizon_seconds", 24 * 3600.0)),
                audit_secret=Secret(environ[secret_env]) if environ.get(secret_env) else None,
                audit_archive_dir=Path(archive_dir) if archive_dir else None,
                audit_keep_entries=int(gateway.get("audit_keep_entries", 10_000)),
                audit_keep_minutes=float(gateway.get("audit_keep_minutes", 60.0)),
                audit_archive_seconds=float(gateway.get("audit_archive_seconds", 10.0)),
                redis_connect_timeout_seconds=float(gateway.get("redis_connect_timeout_seconds", 0.5)),
                redis_timeout_seconds=float(gateway.get("redis_timeout_seconds", 0.5)),
                limits=Limits.model_validate(document.get("limits", {})),
                log_format=env("LOG_FORMAT", default=gateway.get("log_format", "plain")),
                access_log=env("ACCESS_LOG", cast=bool, default=bool(gateway.get("access_log", False))),
                metrics_token=Secret(environ[metrics_env]) if environ.get(metrics_env) else None,
                worker_metrics_port=int(gateway.get("worker_metrics_port", 0)),
            )
        except ValueError as error:
            raise ConfigError(f"invalid setting: {error}") from error


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"cannot read config {path}: {error}") from error


def _adapters(section: Any, environ: Mapping[str, str]) -> dict[str, AdapterSettings]:
    if section is None:
        return {name: AdapterSettings(name=name) for name in ("rooms", "orders")}
    if not isinstance(section, dict):
        raise ConfigError("[adapters] must be a table of adapter tables")
    adapters = {}
    for name, table in section.items():
        adapters[name] = AdapterSettings(
            name=name,
            url=table.get("url"),
            token=_secret(name, table.get("token_env"), environ),
            signing_key=_secret(name, table.get("signing_key_env"), environ),
            timeout_seconds=float(table.get("timeout_seconds", 10.0)),
        )
    return adapters


def _secret(adapter: str, env_name: str | None, environ: Mapping[str, str]) -> Secret | None:
    if not env_name:
        return None
    if env_name not in environ:
        raise ConfigError(f"adapter {adapter}: environment variable {env_name} is not set")
    return Secret(environ[env_name])


def _orgs(section: Any) -> tuple[OrgSettings, ...]:
    if section is None:
        return DEMO_ORGS
    orgs = []
    for name, table in section.items():
        # An org may name adapters that are not configured here: those are registered by manifest
        # and serve nothing until an admin accepts them.
        named = frozenset(table.get("adapters", ()))
        orgs.append(OrgSettings(name=name, adapters=named, roles=frozenset(table.get("roles", ()))))
    return tuple(orgs)
