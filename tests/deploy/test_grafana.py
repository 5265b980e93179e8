"""The Grafana dashboard in deploy/grafana/: the committed JSON is what the Foundation SDK code generates,
Grafana's own model reads it back whole, every query parses as PromQL, and every metric it names is one
the gateway exports."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from deploy.grafana.dashboard import PATH, dashboard_json, queries
from gateway.telemetry.metrics import REGISTRY, Gauges
from tests.support.deploy_tools import required_tool

_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def _exported() -> set[str]:
    """Every sample name a scrape of the gateway can hold: its instruments and its scrape-time gauges."""
    gauges = Gauges(open_cards={"PENDING": 0}, worker_lag_seconds=0.0, ledger_durable=True)
    families = [*REGISTRY.collect(), *gauges.collect()]
    return {family.name + suffix for family in families for suffix in _SUFFIXES[family.type]}


def test_the_committed_dashboard_is_the_generated_one() -> None:
    """`python -m deploy.grafana.dashboard` writes the file; a hand edit of the JSON alone fails here."""
    assert PATH.read_text() == dashboard_json()


def test_grafanas_model_reads_the_dashboard_back_unchanged() -> None:
    """The JSON round-trips through the SDK's Dashboard model (the schema Grafana's own tools generate)."""
    committed = json.loads(PATH.read_text())
    again = json.loads(json.dumps(Dashboard.from_json(committed), cls=JSONEncoder, sort_keys=True))
    assert again == committed


def test_panels_do_not_overlap_and_each_query_has_its_own_ref_id() -> None:
    panels = json.loads(PATH.read_text())["panels"]
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        mine = {
            (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & mine, panel["title"]
        assert grid["x"] + grid["w"] <= 24
        cells |= mine
        refs = [target["refId"] for target in panel.get("targets", [])]
        assert all(refs) and len(set(refs)) == len(refs), panel["title"]


def test_every_metric_a_panel_names_is_one_the_gateway_exports() -> None:
    named = {name for expr in queries() for name in re.findall(r"countersign_[a-z_]+", expr)}
    assert named and named <= _exported(), named - _exported()
    # The operators' views the dashboard promises, each by one of its metrics.
    for metric in ("countersign_tool_calls_total", "countersign_tool_call_duration_seconds_bucket",
                   "countersign_refusals_total", "countersign_card_transitions_total", "countersign_open_cards",
                   "countersign_worker_lag_seconds", "countersign_ledger_durable",
                   "countersign_backend_requests_total"):  # fmt: skip
        assert metric in named


def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    """promtool checks each expression as a recording rule (Grafana's $__rate_interval given a value)."""
    promtool = required_tool("promtool", package="prometheus")
    rules = [
        {"record": f"countersign:dashboard_query_{index}", "expr": expr.replace("$__rate_interval", "5m")}
        for index, expr in enumerate(queries())
    ]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules)} rules found" in checked.stdout
