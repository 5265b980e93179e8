"""deploy/compose/: two gateways, a worker, Redis with Sentinel, Prometheus and Grafana, checked by
`docker compose config` (or Debian's ``docker-compose``, which `.ci/run` installs), and its gateway
configuration loaded the way the gateways load it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config.settings import Settings
from gateway.runtime.serve import preflight
from tests.support.deploy_tools import ROOT, image_environment, required_tool

COMPOSE = ROOT / "deploy" / "compose" / "compose.yaml"


def _compose_command() -> list[str]:
    """``docker compose`` where the plugin answers, else ``docker-compose``; fails in CI without either."""
    docker = shutil.which("docker")
    if docker is not None:
        answer = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30)
        if answer.returncode == 0:
            return [docker, "compose"]
    return [required_tool("docker-compose", package="docker-compose")]


@pytest.fixture(scope="module")
def resolved() -> dict[str, Any]:
    """The file as Compose resolves it (anchors merged, paths absolute), after Compose validated it."""
    command = [*_compose_command(), "-f", str(COMPOSE), "config"]
    answer = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=COMPOSE.parent)
    assert answer.returncode == 0, answer.stderr
    document: dict[str, Any] = yaml.safe_load(answer.stdout)
    return document


def test_compose_accepts_the_file_and_it_has_the_whole_topology(resolved: dict[str, Any]) -> None:
    services = resolved["services"]
    assert set(services) == {
        "gateway-1", "gateway-2", "worker", "redis-primary", "redis-replica",
        "sentinel-1", "sentinel-2", "sentinel-3", "prometheus", "grafana",
    }  # fmt: skip
    for name in ("gateway-1", "gateway-2"):
        assert services[name]["command"][-1].endswith("exec countersign serve --no-worker")
    assert services["worker"]["command"][-1].endswith("exec countersign worker")
    assert "--replicaof" in services["redis-replica"]["command"]
    assert all("sentinel monitor countersign redis-primary 6379 2" in services[f"sentinel-{n}"]["command"][-1]
               for n in (1, 2, 3))  # fmt: skip


def test_the_countersign_containers_are_read_only_and_hold_no_credential(resolved: dict[str, Any]) -> None:
    """Secrets reach the gateways as files the operator makes; the file names none and makes none."""
    for name in ("gateway-1", "gateway-2", "worker"):
        service = resolved["services"][name]
        assert service["read_only"] is True
        assert not {"COUNTERSIGN_AUDIT_SECRET", "COUNTERSIGN_METRICS_TOKEN"} & set(service.get("environment", {}))
        assert "audit_secret" in {secret["source"] if isinstance(secret, dict) else secret
                                  for secret in service["secrets"]}  # fmt: skip
    assert {secret["file"] for secret in resolved["secrets"].values()} == {
        str(COMPOSE.parent / "secrets" / "audit_secret"), str(COMPOSE.parent / "secrets" / "metrics_token"),
    }  # fmt: skip


def test_prometheus_and_grafana_mount_the_shipped_rules_and_dashboard(resolved: dict[str, Any]) -> None:
    def sources(service: str) -> set[Path]:
        volumes = resolved["services"][service]["volumes"]
        return {Path(v["source"] if isinstance(v, dict) else v.split(":")[0]) for v in volumes}

    assert ROOT / "deploy" / "prometheus" / "countersign.rules.yml" in sources("prometheus")
    assert ROOT / "deploy" / "grafana" / "countersign.json" in sources("grafana")
    assert all(
        path.exists() for service in ("prometheus", "grafana") for path in sources(service) if path.is_absolute()
    )
    scrape = yaml.safe_load((COMPOSE.parent / "prometheus.yml").read_text())["scrape_configs"][0]
    assert scrape["static_configs"][0]["targets"] == ["gateway-1:8765", "gateway-2:8765"]


def test_the_gateways_configuration_loads_and_passes_preflight(tmp_path: Path) -> None:
    """The mounted countersign.toml, in the image's environment with the secrets read in, is production on Sentinel."""
    environ = image_environment() | {
        "COUNTERSIGN_CONFIG": str(COMPOSE.parent / "countersign.toml"),
        "COUNTERSIGN_DATA_DIR": str(tmp_path),
        "COUNTERSIGN_AUDIT_SECRET": "a" * 64,
    }
    settings = Settings.load(environ)
    preflight(settings)
    assert not settings.demo
    assert settings.redis_url == "redis+sentinel://sentinel-1:26379,sentinel-2:26379,sentinel-3:26379/countersign"
