"""Settings are read once from a mapping and a TOML file; secrets never show in their repr."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.audit.secret import audit_secret
from gateway.config.settings import DEMO_ORGS, LOOPBACK_HOSTS, Settings
from gateway.errors import ConfigError


def test_environment_and_config_file_are_read_once_into_frozen_settings(tmp_path: Path) -> None:
    """Adapters, orgs, roles, tokens by reference, registry allowlist; demo off with a config file."""
    config = tmp_path / "countersign.toml"
    config.write_text(
        """
[gateway]
port = 9000
lease_seconds = 5
reconcile_horizon_seconds = 3600

[adapters.rooms]
url = "https://rooms.internal.example"
token_env = "ROOMS_TOKEN"
signing_key_env = "ROOMS_SIGNING_KEY"

[orgs.acme]
adapters = ["rooms", "expenses"]
roles = ["staff"]

[registry]
allowed_base_urls = ["https://*.internal.example:443"]
"""
    )
    environ = {"ROOMS_TOKEN": "s3cret", "ROOMS_SIGNING_KEY": "k3y-s3cret", "COUNTERSIGN_REDIS_URL": "redis://r:6379/0"}
    settings = Settings.load(environ, config)
    assert (settings.port, settings.lease_seconds, settings.redis_url) == (9000, 5.0, "redis://r:6379/0")
    assert settings.reconcile_horizon_seconds == 3600.0
    assert str(settings.adapters["rooms"].token) == "s3cret" and settings.demo is False
    assert settings.org_adapters.enabled("acme", "expenses") and settings.org_adapters.enabled("acme", "approvals")
    assert settings.registry_allowed_base_urls == ("https://*.internal.example:443",)
    assert str(settings.adapters["rooms"].signing_key) == "k3y-s3cret"
    assert "s3cret" not in repr(settings)


def test_without_a_config_file_it_is_the_demo(tmp_path: Path) -> None:
    """No file: demo mode with the demo orgs, a 30 s lease and a 24 h reconciliation horizon."""
    settings = Settings.load({})
    assert settings.demo and {org.name for org in settings.orgs} == {"acme", "globex"}
    assert (settings.lease_seconds, settings.reconcile_horizon_seconds) == (30.0, 24 * 3600.0)
    assert settings.registry_allowed_base_urls == ("http://127.0.0.1:*",)  # the demo's own loopback backends


def test_production_allows_registered_adapters_nowhere_until_the_operator_names_where(tmp_path: Path) -> None:
    """A config without ``[registry] allowed_base_urls`` admits no base URL at all, loopback included: the
    gateway's backend credentials, identities and receipts go only where an operator said."""
    config = tmp_path / "countersign.toml"
    config.write_text("[gateway]\nport = 9000\n")
    settings = Settings.load(
        {"COUNTERSIGN_AUDIT_SECRET": "x" * 32, "COUNTERSIGN_REDIS_URL": "redis://r:6379/0"}, config
    )
    assert settings.demo is False and settings.registry_allowed_base_urls == ()
    config.write_text("[gateway]\nport = 9000\n[registry]\nallowed_base_urls = []\n")
    assert (
        Settings.load(
            {"COUNTERSIGN_AUDIT_SECRET": "x" * 32, "COUNTERSIGN_REDIS_URL": "redis://r:6379/0"}, config
        ).registry_allowed_base_urls
        == ()
    )


@pytest.mark.parametrize(
    "text",
    [
        '[adapters.rooms]\ntoken_env = "MISSING"\n',
        '[adapters.rooms]\nsigning_key_env = "MISSING"\n',
        "[nonsense]\n",
        "not toml at all [",
        "[gateway]\nreconcile_horizon_seconds = 0\n",
        "[gateway]\nlease_seconds = -1\n",
    ],
)
def test_bad_configuration_is_a_config_error(tmp_path: Path, text: str) -> None:
    """A token_env or signing_key_env that is not set, an unknown section, unreadable TOML, or a lease or
    reconciliation horizon that is not positive is refused clearly."""
    config = tmp_path / "bad.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as caught:
        Settings.load({}, config)
    assert str(caught.value)


@pytest.mark.parametrize(
    ("environ", "with_file", "demo_flag", "demo"),
    [
        ({}, False, False, True),
        ({"COUNTERSIGN_REDIS_URL": "redis://r:6379/0"}, False, False, False),
        ({}, True, False, False),
        ({"COUNTERSIGN_MODE": "production"}, False, False, False),
        ({"COUNTERSIGN_MODE": "demo"}, True, False, True),
        ({"COUNTERSIGN_MODE": "production", "COUNTERSIGN_REDIS_URL": "redis://r:6379/0"}, True, True, True),
    ],
)
def test_the_mode_is_demo_only_when_nothing_is_configured_or_it_is_asked_for(
    tmp_path: Path, environ: dict[str, str], with_file: bool, demo_flag: bool, demo: bool
) -> None:
    """No file and no Redis URL is the demo; a file, a Redis URL or COUNTERSIGN_MODE=production is
    production; `serve --demo` (demo=True) is the demo whatever else is set."""
    config = tmp_path / "countersign.toml"
    config.write_text("")
    settings = Settings.load(environ, config if with_file else None, demo=demo_flag)
    assert settings.demo is demo


def test_production_has_no_demo_adapters_orgs_or_audit_secret(tmp_path: Path) -> None:
    """Without [adapters] and [orgs], production configures none (the demo has its own); and without
    the audit secret nothing that records the trail can start."""
    production = Settings.load({"COUNTERSIGN_REDIS_URL": "redis://r:6379/0", "COUNTERSIGN_DATA_DIR": str(tmp_path)})
    assert (dict(production.adapters), production.orgs) == ({}, ())
    with pytest.raises(ConfigError) as refused:
        audit_secret(production)
    assert "COUNTERSIGN_AUDIT_SECRET" in str(refused.value)
    assert not (tmp_path / "audit.secret").exists()
    demo = Settings.load({"COUNTERSIGN_DATA_DIR": str(tmp_path)})
    assert set(demo.adapters) == {"rooms", "orders"} and demo.orgs == DEMO_ORGS
    assert audit_secret(demo) == audit_secret(demo)  # generated once, then read back


def test_an_unknown_mode_or_a_bad_environment_value_is_refused_by_name() -> None:
    for environ, named in (({"COUNTERSIGN_MODE": "prod"}, "COUNTERSIGN_MODE"), ({"COUNTERSIGN_PORT": "x"}, "PORT")):
        with pytest.raises(ConfigError) as refused:
            Settings.load(environ)
        assert named in str(refused.value)


def test_allowed_hosts_and_origins_come_from_the_file_or_the_environment(tmp_path: Path) -> None:
    """The environment's comma-separated lists win over the file's; an empty one allows no origin."""
    config = tmp_path / "countersign.toml"
    config.write_text('[gateway]\nallowed_hosts = ["a.example:443"]\nallowed_origins = ["https://a.example"]\n')
    from_file = Settings.load({}, config)
    assert (from_file.allowed_hosts, from_file.allowed_origins) == (("a.example:443",), ("https://a.example",))
    from_env = Settings.load(
        {"COUNTERSIGN_ALLOWED_HOSTS": " b.example:443, c.example:* ", "COUNTERSIGN_ALLOWED_ORIGINS": ""}, config
    )
    assert (from_env.allowed_hosts, from_env.allowed_origins) == (("b.example:443", "c.example:*"), ())


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_on_loopback_the_checks_default_to_the_loopback_names(host: str) -> None:
    settings = Settings(host=host)
    assert settings.mcp_allowed_hosts() == list(LOOPBACK_HOSTS)
    assert "http://127.0.0.1:*" in settings.mcp_allowed_origins()
    assert "https://localhost:*" in settings.mcp_allowed_origins()


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@given(
    host=st.one_of(st.sampled_from(["0.0.0.0", "::", "10.1.2.3", "127.0.0.1", "gw.example"]), st.text(max_size=30)),
    hosts=st.sampled_from([None, ("gw.example:443",)]),
    origins=st.sampled_from([None, (), ("https://c.example",)]),
)
def test_host_and_origin_checks_are_never_off(
    host: str, hosts: tuple[str, ...] | None, origins: tuple[str, ...] | None
) -> None:
    """Whatever the bind address, the checks get explicit, non-empty host patterns, or the gateway
    refuses to start; beyond loopback only when both lists are configured, and then exactly those."""
    settings = Settings(host=host, allowed_hosts=hosts, allowed_origins=origins)
    try:
        allowed, allowed_origins = settings.mcp_allowed_hosts(), settings.mcp_allowed_origins()
    except ConfigError as refused:
        assert hosts is None or origins is None
        assert "allowed_hosts and allowed_origins" in str(refused)
        return
    assert allowed
    if not _loopback(host.strip("[]")):
        assert (tuple(allowed), tuple(allowed_origins)) == (hosts, origins)


def test_an_empty_host_list_is_refused_rather_than_refusing_every_request() -> None:
    """``COUNTERSIGN_ALLOWED_HOSTS=""`` would make /mcp answer 421 to everyone: serve will not start so."""
    with pytest.raises(ConfigError) as refused:
        Settings.load({"COUNTERSIGN_ALLOWED_HOSTS": ""}).mcp_allowed_hosts()
    assert "allowed_hosts is empty" in str(refused.value)
