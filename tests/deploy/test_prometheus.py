"""The alert rules in deploy/prometheus/: every rule has a `promtool test rules` case that passes, and a
real Prometheus scraping a real gateway sees "ledger not durable" fire once durability is switched off.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from redis import Redis

from backends.serve import serve_app_in_thread
from gateway.runtime.app import create_app
from tests.support.browser import browser, screenshot, shots
from tests.support.deploy_tools import required_tool
from tests.support.redis_server import free_port, start_redis_process
from tests.support.services import Backend, gateway_settings

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "countersign.rules.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "countersign.rules.test.yml"
FIRING_WITHIN_SECONDS = 120.0
"""Bound on the live test's wait: the rule's 15 s `for`, one-second scrapes and evaluations, and a
loaded 2-core machine."""


def _alerts() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["alert"] for group in groups for rule in group["rules"]]


def test_every_rule_has_a_case_where_it_fires_and_one_where_it_does_not() -> None:
    """Each alert appears in the promtool tests both firing and silent, so a rule cannot go untested."""
    cases = [case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    for alert in _alerts():
        outcomes = {bool(case["exp_alerts"]) for case in cases if case["alertname"] == alert}
        assert outcomes == {True, False}, alert
    assert len(_alerts()) == 9


def test_promtool_accepts_the_rules() -> None:
    promtool = required_tool("promtool", package="prometheus")
    checked = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.slow  # a simulated day of evaluations every 15 s (the flood alert's `offset 1d`): seconds of CPU
def test_every_promtool_case_passes() -> None:
    """The cases themselves, in CI's full pass; the inner loop keeps the rules' syntax and each alert's two cases."""
    promtool = required_tool("promtool", package="prometheus")
    tested = subprocess.run([promtool, "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


@pytest.fixture
def durable_server() -> Iterator[str]:
    """A Redis of its own, durable (AOF fsynced always, no eviction), so the test may switch that off."""
    with start_redis_process(appendonly=True, appendfsync="always") as (url, _pid):
        yield url


@pytest.fixture
def prometheus() -> Iterator[tuple[Path, int]]:
    """A directory for Prometheus's configuration and data, and a free port for its API."""
    required_tool("prometheus", package="prometheus")
    with tempfile.TemporaryDirectory(prefix="countersign-prometheus-") as directory:
        yield Path(directory), free_port()


def _api(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
        return json.loads(answer.read())["data"]


def _poll(condition: Any, *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = condition()
        except OSError:
            found = None
        if found:
            return found
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(0.25)


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_real_prometheus_sees_ledger_not_durable_fire_after_durability_is_switched_off(
    durable_server: str, backends: dict[str, Backend], prometheus: tuple[Path, int], tmp_path: Path
) -> None:
    """Prometheus scrapes the gateway's /metrics with the shipped rules: nothing fires while the ledger is
    durable; `CONFIG SET appendonly no` makes CountersignLedgerNotDurable fire for that instance, and
    Prometheus's own alerts page shows it firing (screenshot)."""
    directory, port = prometheus
    with serve_app_in_thread(create_app(gateway_settings(durable_server, backends)), lifespan=True) as base:
        target = base.removeprefix("http://")
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [RULES.name],  # copied beside the configuration, where Prometheus reads it from
            "scrape_configs": [{"job_name": "countersign", "static_configs": [{"targets": [target]}]}],
        }
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
        shutil.copy(RULES, directory / RULES.name)
        command = [required_tool("prometheus", package="prometheus"),
                   f"--config.file={directory / 'prometheus.yml'}", f"--storage.tsdb.path={directory / 'data'}",
                   f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
        with open(directory / "prometheus.log", "wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            try:
                query = "/api/v1/query?query=countersign_ledger_durable"
                await anyio.to_thread.run_sync(lambda: _poll(
                    lambda: [s for s in _api(port, query)["result"] if s["value"][1] == "1"],
                    timeout=60, what="Prometheus scraping a durable ledger"))  # fmt: skip
                assert not [a for a in _api(port, "/api/v1/alerts")["alerts"] if a["state"] == "firing"]
                with Redis.from_url(durable_server) as redis:
                    redis.config_set("appendonly", "no")

                def firing() -> list[dict[str, Any]]:
                    alerts = _api(port, "/api/v1/alerts")["alerts"]
                    return [a for a in alerts if a["labels"]["alertname"] == "CountersignLedgerNotDurable"
                            and a["state"] == "firing"]  # fmt: skip

                [alert] = await anyio.to_thread.run_sync(
                    lambda: _poll(firing, timeout=FIRING_WITHIN_SECONDS, what="CountersignLedgerNotDurable firing")
                )
                assert alert["labels"]["instance"] == target and alert["labels"]["severity"] == "page"
                summary = f"Countersign ledger not durable on {target}: writes are refused"
                assert alert["annotations"]["summary"] == summary
                # Debian's Prometheus serves its classic web UI (the React one is not packaged).
                async with browser(tmp_path / "profile") as page:
                    await page.send("Page.navigate", {"url": f"http://127.0.0.1:{port}/classic/alerts"})
                    await page.until("document.body.innerText.includes('CountersignLedgerNotDurable')", seconds=30)
                    await screenshot(page, shots(tmp_path) / "prometheus-alert-firing.png")
            finally:
                process.terminate()
                process.wait(timeout=30)
