"""The parts of `gateway.config.settings` built from the config file's sections: adapters, orgs, the Redis deployment.

`gateway.config.settings.Settings.load` is their only caller; the dataclasses are re-exported there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from starlette.datastructures import Secret

from gateway.config.file import AdapterSection, GatewaySection, OrgSection
from gateway.config.redis_target import redis_url_of
from gateway.errors import ConfigError

__all__ = ["DEMO_ORGS", "AdapterSettings", "OrgSettings", "adapters_from", "deployment_url", "orgs_from"]

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
    name: str
    adapters: frozenset[str]
    roles: frozenset[str]
    tainted_approvals: int = 1
    """Distinct approvers a card of this org needs at least when it is tainted (`gateway.provenance`)."""


DEMO_ORGS: tuple[OrgSettings, ...] = (
    OrgSettings(name="acme", adapters=frozenset({"rooms", "orders", "expenses"}), roles=_DEMO_ROLES),
    OrgSettings(name="globex", adapters=frozenset({"rooms", "orders", "expenses"}), roles=_DEMO_ROLES),
)


def deployment_url(gateway: GatewaySection, environ: Mapping[str, str]) -> str | None:
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


def adapters_from(
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


def orgs_from(section: Mapping[str, OrgSection] | None, *, demo: bool) -> tuple[OrgSettings, ...]:
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
