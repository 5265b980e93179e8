"""The TOML config file as data: one pydantic model per section, every unknown key refused.

`read_config(path)` is how `gateway.config.settings.Settings.load` reads the file; nothing else parses it.
Each section is a model with ``extra="forbid"``, and the document is validated strictly (TOML
already types its values, so ``port = "8765"`` is a mistake to report, not a string to coerce).
Every problem becomes one line of one `ConfigError` that names the file and the key's path
(``gateway.bogus: unknown setting``, ``adapters.rooms.tokn_env: unknown setting``,
``gateway.port: Input should be a valid integer (got '8o')``), the ``[limits]`` section's
(`gateway.limits.budgets.Limits`), the ``[approvals]`` section's (`gateway.config.approvals.ApprovalSettings`)
and the ``[oauth]`` section's (`gateway.config.oauth.OAuthSection`) included.

The defaults here are the ones `Settings` has (a test holds them equal); the README's
configuration tables document each of them.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gateway.audit.formats import AuditExportTarget
from gateway.config.approvals import ApprovalSettings
from gateway.config.console import ConsoleSection
from gateway.config.oauth import OAuthSection
from gateway.config.upstreams import UpstreamSection, check_upstream_name
from gateway.errors import ConfigError
from gateway.limits.budgets import Limits
from gateway.notifications.message import NotificationEvent, NotificationSettings, PayloadFormat, Webhook

__all__ = [
    "AdapterSection",
    "AuditExportSection",
    "ConfigFile",
    "GatewaySection",
    "NotificationsSection",
    "OrgSection",
    "RegistrySection",
    "WebhookSection",
    "key_path",
    "read_config",
]

_CLOSED = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # no setting is infinite or NaN
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_MAX_SHOWN_INPUT = 60


class GatewaySection(BaseModel):
    """``[gateway]``: where the gateway listens, what it trusts, and its Redis and audit bounds."""

    model_config = _CLOSED
    host: str = "127.0.0.1"
    """The address to bind. Anything but loopback needs `allowed_hosts` and `allowed_origins` too."""
    port: int = Field(default=8765, ge=1, le=65535)
    redis_url: str | None = None
    """An external Redis; unset, the embedded server of `data_dir` (``COUNTERSIGN_REDIS_URL`` wins)."""
    redis_sentinels: list[str] | None = Field(default=None, min_length=1)
    """Sentinels (``host:port``) to ask for the master `redis_master_name`, instead of `redis_url`."""
    redis_master_name: str | None = Field(default=None, min_length=1)
    redis_cluster_nodes: list[str] | None = Field(default=None, min_length=1)
    """Seed nodes (``host:port``) of a Redis Cluster, instead of `redis_url`."""
    redis_username: str | None = None
    redis_password_env: str | None = Field(default=None, min_length=1)
    """The variable holding the password of `redis_sentinels`' master or `redis_cluster_nodes`."""
    redis_tls: bool = False
    data_dir: str = ".countersign"
    allowed_hosts: list[str] | None = Field(default=None, min_length=1)
    """``Host`` headers accepted on /mcp (``host:port``, ``host:*``); unset, the loopback names."""
    allowed_origins: list[str] | None = None
    """``Origin`` headers accepted on /mcp (``https://console.example``, ``http://host:*``); a request
    without one passes. Unset on loopback: derived from `allowed_hosts`. ``[]``: no browser origin."""
    mcp_stateless: bool = False
    write_task_support: Literal["optional", "forbidden"] = "optional"
    """Whether a client may follow a write proposal as an MCP task (`Settings.write_task_support`)."""
    run_worker: bool = True
    key_cache_seconds: float = Field(default=1.0, ge=0)
    lease_seconds: float = Field(default=30.0, gt=0)
    reconcile_horizon_seconds: float = Field(default=24 * 3600.0, gt=0)
    audit_secret_env: str = Field(default="COUNTERSIGN_AUDIT_SECRET", min_length=1)
    audit_archive_dir: str | None = None
    policies: str | None = None
    """A Cedar policy file or directory of ``*.cedar`` files; unset: the built-in rules decide."""
    audit_keep_entries: int = Field(default=10_000, ge=1)
    audit_keep_minutes: float = Field(default=60.0, ge=0)
    audit_archive_seconds: float = Field(default=10.0, gt=0)
    card_keep_days: float = Field(default=30.0, ge=0)
    card_archive_dir: str | None = None
    card_retention_seconds: float = Field(default=60.0, gt=0)
    redis_connect_timeout_seconds: float = Field(default=0.5, gt=0)
    redis_timeout_seconds: float = Field(default=0.5, gt=0)
    log_format: Literal["plain", "json"] = "plain"
    access_log: bool = False
    metrics_token_env: str = Field(default="COUNTERSIGN_METRICS_TOKEN", min_length=1)
    """The variable holding the bearer token ``/metrics`` requires; unset variable: loopback peers only."""
    worker_metrics_port: int = Field(default=0, ge=0, le=65535)
    min_replicas: int = Field(default=0, ge=0)
    """Replicas that must confirm every ledger transition (``WAITAOF``/``WAIT``) before it counts."""


class AdapterSection(BaseModel):
    """``[adapters.<name>]``: one backend and the gateway's credentials for it, by variable name."""

    model_config = _CLOSED
    url: str | None = None
    """The backend's base URL. Unset: the demo backend of that name (demo mode only)."""
    token_env: str | None = None
    signing_key_env: str | None = None
    timeout_seconds: float = Field(default=10.0, gt=0)
    health_path: str = "/_health"

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        return url if url is None else _require_http(url)


class OrgSection(BaseModel):
    """``[orgs.<name>]``: the adapters an org serves and the roles its keys may hold."""

    model_config = _CLOSED
    adapters: list[str] = Field(default_factory=list)
    roles: list[str] = Field(default_factory=list)
    tainted_approvals: int = Field(default=1, ge=1, le=10)
    """Distinct approvers a tainted card needs at least (`policies.approval.approvals_required`)."""


class RegistrySection(BaseModel):
    """``[registry]``: what registered adapters may point at. Unset (None), it is any loopback port in demo
    mode and nothing in production: a production gateway sends its backend credentials, signed identities
    and approval receipts only where an operator named."""

    model_config = _CLOSED
    allowed_base_urls: list[str] | None = None


EventName = Literal["pending", "expiring", "failed", "unknown", "needs_reconciliation"]
_ALL_EVENTS: tuple[EventName, ...] = ("pending", "expiring", "failed", "unknown", "needs_reconciliation")


class WebhookSection(BaseModel):
    """``[notifications.webhooks.<name>]``: one receiver of notifications, and whose cards it hears of."""

    model_config = _CLOSED
    url: str
    secret_env: str = Field(min_length=1)
    """The variable holding the HMAC key bodies are signed with (the receiver knows it too)."""
    format: Literal["json", "slack"] = "json"
    orgs: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    approver_roles: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    events: list[EventName] = Field(default_factory=lambda: list(_ALL_EVENTS), min_length=1)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        return _require_http(url)


class NotificationsSection(BaseModel):
    """``[notifications]``: how notifications are delivered, and the link they carry."""

    model_config = _CLOSED
    console_url: str = "http://127.0.0.1:8765"
    """The gateway's address as approvers reach it; card links point at ``<console_url>/admin/``."""
    max_attempts: int = Field(default=10, ge=1)
    retry_base_seconds: float = Field(default=1.0, gt=0)
    retry_cap_seconds: float = Field(default=300.0, gt=0)
    timeout_seconds: float = Field(default=5.0, gt=0)
    poll_seconds: float = Field(default=1.0, gt=0)
    expiry_warning_seconds: float = Field(default=900.0, ge=0)
    """How long before its decide-by a PENDING card is announced as expiring; 0: never."""
    webhooks: dict[str, WebhookSection] = Field(default_factory=dict)

    def resolve(self, environ: Mapping[str, str]) -> NotificationSettings:
        """These settings, each webhook's secret read from its variable.

        Raises:
            ConfigError: a webhook's ``secret_env`` is not set: an unsigned notification is never sent.
        """
        webhooks = []
        for name, hook in self.webhooks.items():
            secret = environ.get(hook.secret_env, "")
            if not secret:
                raise ConfigError(f"notifications.webhooks.{name}.secret_env: {hook.secret_env} is not set")
            webhooks.append(
                Webhook(
                    name=name,
                    url=hook.url,
                    secret=secret,
                    format=PayloadFormat(hook.format),
                    orgs=frozenset(hook.orgs),
                    approver_roles=frozenset(hook.approver_roles),
                    events=frozenset(NotificationEvent(f"card.{event}") for event in hook.events),
                )
            )
        return NotificationSettings(
            console_url=self.console_url,
            webhooks=tuple(webhooks),
            max_attempts=self.max_attempts,
            retry_base_seconds=self.retry_base_seconds,
            retry_cap_seconds=self.retry_cap_seconds,
            timeout_seconds=self.timeout_seconds,
            poll_seconds=self.poll_seconds,
            expiry_warning_seconds=self.expiry_warning_seconds,
        )


class AuditExportSection(BaseModel):
    """``[audit_export]``: post every new audit entry to a collector, signed like the notifications."""

    model_config = _CLOSED
    url: str | None = None
    """Unset: no live export (``countersign audit export`` still prints the trail)."""
    secret_env: str | None = None
    format: Literal["jsonl", "ocsf"] = "jsonl"
    batch: int = Field(default=500, ge=1, le=10_000)
    poll_seconds: float = Field(default=1.0, gt=0)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        return url if url is None else _require_http(url)

    def resolve(self, environ: Mapping[str, str]) -> AuditExportTarget | None:
        """The target, its secret read from its variable; None without a URL.

        Raises:
            ConfigError: a URL without a set ``secret_env``: nothing is exported unsigned.
        """
        if self.url is None:
            return None
        secret = environ.get(self.secret_env or "", "")
        if not secret:
            raise ConfigError(f"audit_export.secret_env: {self.secret_env or '(unset)'} must name a set variable")
        return AuditExportTarget(
            url=self.url, secret=secret, format=self.format, batch=self.batch, poll_seconds=self.poll_seconds
        )


class ConfigFile(BaseModel):
    """The whole file. `adapters` and `orgs` stay None when their section is absent."""

    model_config = _CLOSED
    gateway: GatewaySection = GatewaySection()
    adapters: dict[str, AdapterSection] | None = None
    orgs: dict[str, OrgSection] | None = None
    registry: RegistrySection = RegistrySection()
    limits: Limits = Limits()
    approvals: ApprovalSettings = ApprovalSettings()
    oauth: OAuthSection = OAuthSection()
    console: ConsoleSection = ConsoleSection()
    notifications: NotificationsSection = NotificationsSection()
    audit_export: AuditExportSection = AuditExportSection()
    upstreams: dict[str, UpstreamSection] = Field(default_factory=dict)
    """``[upstreams.<name>]``: MCP servers the gateway fronts (`gateway.config.upstreams`)."""

    @field_validator("upstreams")
    @classmethod
    def _upstream_names(cls, upstreams: dict[str, UpstreamSection]) -> dict[str, UpstreamSection]:
        for name in upstreams:
            check_upstream_name(name)
        return upstreams


def _require_http(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return url


def read_config(path: Path) -> ConfigFile:
    """Parse and validate the config file at `path`.

    Raises:
        ConfigError: the file cannot be read or is not TOML, or it breaks the models: one line per
            problem, each naming its key's path.
    """
    try:
        with path.open("rb") as handle:
            document = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"cannot read config {path}: {error}") from error
    try:
        return ConfigFile.model_validate(document, strict=True)
    except ValidationError as error:
        problems = "\n".join(f"  {_problem(detail)}" for detail in error.errors(include_url=False))
        raise ConfigError(f"invalid config {path}:\n{problems}") from error


def key_path(location: tuple[int | str, ...]) -> str:
    """A pydantic error location as a TOML key path: ``adapters.rooms.url``, ``orgs.acme.roles[1]``,
    with keys that are not bare quoted (``gateway."a.b"``) so the path cannot be misread."""
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
            continue
        shown = part if _BARE_KEY.fullmatch(part) else _quoted(part)
        path += f".{shown}" if path else shown
    return path


def _problem(detail: Any) -> str:
    location = tuple(detail["loc"])
    path = key_path(location)
    if detail["type"] == "extra_forbidden":
        return f"{path}: unknown {'section' if len(location) == 1 else 'setting'}"
    shown = repr(detail["input"])
    if len(shown) > _MAX_SHOWN_INPUT:
        shown = shown[: _MAX_SHOWN_INPUT - 3] + "..."
    return f"{path}: {detail['msg']} (got {shown})"


def _quoted(key: str) -> str:
    """`key` as a TOML basic string, every control character escaped."""
    escaped = key.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c.isprintable() else _escape(c) for c in escaped) + '"'


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
