"""Settings are read once from a mapping and a TOML file; secrets never show in their repr."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.errors import ConfigError
from gateway.settings import Settings


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
