"""The Docker image runs production mode by default (no daemon is needed to check what it sets)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gateway.config.settings import Settings
from gateway.errors import ConfigError
from gateway.runtime.serve import preflight

ROOT = Path(__file__).resolve().parents[2]


def _instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def _environment() -> dict[str, str]:
    environ: dict[str, str] = {}
    for instruction, rest in _instructions():
        if instruction == "ENV":
            environ.update(re.findall(r"(\w+)=(\S+)", rest))
    return environ


def test_the_image_serves_in_production_mode_by_default() -> None:
    """Its command is plain `countersign serve`, and its environment makes that production."""
    [command] = [json.loads(rest) for instruction, rest in _instructions() if instruction == "CMD"]
    assert command == ["countersign", "serve"]
    settings = Settings.load(_environment())
    assert not settings.demo and settings.host == "0.0.0.0"


def test_the_image_refuses_to_start_without_its_allow_lists_and_audit_secret(tmp_path: Path) -> None:
    """Bound to every address, it needs the Host and Origin allow-lists; then the audit secret."""
    environ = _environment() | {"COUNTERSIGN_DATA_DIR": str(tmp_path)}
    with pytest.raises(ConfigError) as exposed:
        preflight(Settings.load(environ))
    assert "allowed_hosts and allowed_origins" in str(exposed.value)
    environ |= {"COUNTERSIGN_ALLOWED_HOSTS": "gw.example:8765", "COUNTERSIGN_ALLOWED_ORIGINS": "https://gw.example"}
    with pytest.raises(ConfigError) as unkeyed:
        preflight(Settings.load(environ))
    assert "COUNTERSIGN_AUDIT_SECRET" in str(unkeyed.value)
    ready = Settings.load(environ | {"COUNTERSIGN_AUDIT_SECRET": "s" * 32})
    preflight(ready)
    assert not ready.adapters and not ready.orgs  # no demo adapter or org: they come from the config
