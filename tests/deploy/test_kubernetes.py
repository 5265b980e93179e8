"""The Kubernetes manifests in deploy/kubernetes/: valid against the Kubernetes schemas (kubernetes-validate,
strict, offline), and saying what the issue of running it there asks: gateway and worker Deployments, a
Service, disruption budgets, probes on /healthz and /readyz, config from a ConfigMap the gateway reads,
secrets from a Secret, no root, a read-only root filesystem."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gateway.config.settings import Settings
from gateway.runtime.serve import preflight
from tests.support.deploy_tools import image_environment

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
VERSIONS = ["1.30.0", "1.33.0"]
"""The oldest Kubernetes still supported upstream when this was written, and a recent one."""


def _resources(*, example: bool = True) -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    names = [*kustomization["resources"], *(["secret.example.yaml"] if example else [])]
    return [doc for name in names for doc in yaml.safe_load_all((MANIFESTS / name).read_text()) if doc]


def _by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in _resources() if doc["kind"] == kind}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_against_the_kubernetes_schemas(version: str) -> None:
    """Strict: an unknown or misspelt field fails, as it would be dropped (or refused) by the API server."""
    resources = _resources()
    assert {doc["kind"] for doc in resources} >= {
        "Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "Secret", "PersistentVolumeClaim",
    }  # fmt: skip
    for resource in resources:
        kubernetes_validate.validate(resource, version, strict=True)


def test_a_misspelt_field_fails_the_validation() -> None:
    """The validation above can fail: a typo in a probe is refused."""
    gateway = _by_kind("Deployment")["countersign-gateway"]
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    broken = {**container, "readinesProbe": {**container["readinessProbe"], "httpGett": {"path": "/readyz"}}}
    gateway["spec"]["template"]["spec"]["containers"] = [broken]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(gateway, VERSIONS[0], strict=True)


def test_gateway_and_worker_run_as_non_root_on_a_read_only_root_filesystem() -> None:
    deployments = _by_kind("Deployment")
    assert set(deployments) == {"countersign-gateway", "countersign-worker"}
    for deployment in deployments.values():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
            assert security["capabilities"]["drop"] == ["ALL"]
    commands = {name: d["spec"]["template"]["spec"]["containers"][0]["args"] for name, d in deployments.items()}
    assert commands == {
        "countersign-gateway": ["countersign", "serve", "--no-worker"],
        "countersign-worker": ["countersign", "worker"],
    }


def test_the_gateway_is_probed_on_healthz_and_readyz_behind_a_service_and_both_have_budgets() -> None:
    gateway = _by_kind("Deployment")["countersign-gateway"]
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    labels = gateway["spec"]["template"]["metadata"]["labels"]
    [service] = _by_kind("Service").values()
    assert service["spec"]["selector"].items() <= labels.items()
    budgets = _by_kind("PodDisruptionBudget")
    for name, deployment in _by_kind("Deployment").items():
        selector = budgets[name]["spec"]["selector"]["matchLabels"]
        assert selector == deployment["spec"]["selector"]["matchLabels"]
        assert budgets[name]["spec"]["minAvailable"] < deployment["spec"]["replicas"]


def test_the_shipped_config_is_one_the_gateway_accepts_with_the_secrets_it_names(tmp_path: Path) -> None:
    """The ConfigMap's file loads and passes serve's preflight once the Secret's values are there: production,
    Sentinel, the allow-lists set. Every secret comes from the Secret, none is written in a manifest."""
    [config] = _by_kind("ConfigMap").values()
    path = tmp_path / "countersign.toml"
    path.write_text(config["data"]["countersign.toml"])
    container = _by_kind("Deployment")["countersign-gateway"]["spec"]["template"]["spec"]["containers"][0]
    plain = {env["name"]: env["value"] for env in container["env"] if "value" in env}
    from_secret = {env["name"]: env["valueFrom"]["secretKeyRef"] for env in container["env"] if "valueFrom" in env}
    assert set(from_secret) == {"COUNTERSIGN_AUDIT_SECRET", "COUNTERSIGN_METRICS_TOKEN", "COUNTERSIGN_REDIS_PASSWORD"}
    [secret] = _by_kind("Secret").values()
    assert {ref["key"] for ref in from_secret.values()} == set(secret["stringData"])
    assert all(value == "" for value in secret["stringData"].values())  # an example, never a credential
    environ = image_environment() | plain | {"COUNTERSIGN_CONFIG": str(path), "COUNTERSIGN_DATA_DIR": str(tmp_path)}
    environ |= {name: f"{ref['key']}-value-0123456789abcdef0123456789" for name, ref in from_secret.items()}
    settings = Settings.load(environ)
    preflight(settings)
    assert not settings.demo and settings.host == "0.0.0.0"
    assert settings.redis_url is not None and settings.redis_url.startswith("redis+sentinel://")
