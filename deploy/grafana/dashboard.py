"""The Grafana dashboard for operators, generated with Grafana's Foundation SDK (PyPI ``grafana-foundation-sdk``).

Run ``python -m deploy.grafana.dashboard`` to write ``countersign.json`` beside this file (the file Grafana
provisions; ``deploy/compose/`` mounts it). ``tests/deploy/test_grafana.py`` checks that the committed file
is what this module generates, that every query parses as PromQL (``promtool``), and that every metric it
names is one the gateway exports.

The views follow the README's metrics table: request rate and latency by tool, refusals by code, the card
flow from proposal to outcome, queue depths (open cards, worker lag, audit export backlog), backends, and
Redis health (ledger durability). Shared gauges (the same on every replica) are read with ``max``.
"""

from __future__ import annotations

import json
from pathlib import Path

from grafana_foundation_sdk.builders import common as common_builder
from grafana_foundation_sdk.builders import dashboard as dashboard_builder
from grafana_foundation_sdk.builders import prometheus as prometheus_builder
from grafana_foundation_sdk.builders import stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import DataSourceRef

__all__ = ["PATH", "dashboard_json", "queries"]

PATH = Path(__file__).with_name("countersign.json")
UID = "countersign-gateway"
_DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
_RATE = "$__rate_interval"


def _query(expr: str, legend: str) -> prometheus_builder.Dataquery:
    return prometheus_builder.Dataquery().expr(expr).legend_format(legend)


def _series(title: str, unit: str, *targets: prometheus_builder.Dataquery, stacked: bool = False) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .datasource(_DATASOURCE)
        .unit(unit)
        .min(0)
        .height(8)
        .span(12)
        .fill_opacity(10)
        .legend(
            common_builder.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["lastNotNull", "max"])
        )
    )
    if stacked:
        panel = panel.stacking(common_builder.StackingConfig().mode(common.StackingMode.NORMAL))
    for ref_id, target in zip("ABCDEFGH", targets, strict=False):
        panel = panel.with_target(target.ref_id(ref_id))
    return panel


def _stat(title: str, unit: str, target: prometheus_builder.Dataquery) -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .datasource(_DATASOURCE)
        .unit(unit)
        .height(4)
        .span(6)
        .reduce_options(common_builder.ReduceDataOptions().calcs(["lastNotNull"]))
        .color_mode(common.BigValueColorMode.VALUE)
        .with_target(target.ref_id("A"))
    )


def _rate(metric: str, by: str, selector: str = "") -> str:
    return f"sum by ({by}) (rate({metric}{selector}[{_RATE}]))"


def _quantile(q: float, histogram: str, by: str) -> str:
    return f"histogram_quantile({q}, sum by ({by}, le) (rate({histogram}_bucket[{_RATE}])))"


def _build() -> dashboard_builder.Dashboard:
    tool_seconds = "countersign_tool_call_duration_seconds"
    decision_seconds = "countersign_approval_latency_seconds"
    return (
        dashboard_builder.Dashboard("Countersign")
        .uid(UID)
        .description("Agents' calls, cards from proposal to outcome, queues, backends and the ledger's Redis.")
        .tags(["countersign", "mcp"])
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .with_variable(dashboard_builder.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_row(dashboard_builder.Row("Health"))
        .with_panel(
            _stat(
                "Ledger durable (min over gateways)",
                "bool_yes_no",
                _query("min(countersign_ledger_durable)", "durable"),
            )
        )
        .with_panel(_stat("Oldest approved card waiting", "s", _query("max(countersign_worker_lag_seconds)", "lag")))
        .with_panel(_stat("Open cards", "short", _query("sum(max by (state) (countersign_open_cards))", "open")))
        .with_panel(_stat("Audit export behind", "s", _query("max(countersign_audit_export_backlog_seconds)", "lag")))
        .with_row(dashboard_builder.Row("Agents"))
        .with_panel(
            _series(
                "Tool calls by tool",
                "reqps",
                _query(_rate("countersign_tool_calls_total", "tool"), "{{tool}}"),
                stacked=True,
            )
        )
        .with_panel(
            _series(
                "Tool call latency (p50, p90) by tool",
                "s",
                _query(_quantile(0.5, tool_seconds, "tool"), "p50 {{tool}}"),
                _query(_quantile(0.9, tool_seconds, "tool"), "p90 {{tool}}"),
            )
        )
        .with_panel(
            _series(
                "Refusals by code",
                "reqps",
                _query(_rate("countersign_refusals_total", "code"), "{{code}}"),
                stacked=True,
            )
        )
        .with_panel(
            _series(
                "Rate-limit and edge refusals",
                "reqps",
                _query(_rate("countersign_rate_limit_refusals_total", "code"), "{{code}}"),
                _query(_rate("countersign_mcp_edge_refusals_total", "code"), "edge {{code}}"),
            )
        )
        .with_row(dashboard_builder.Row("Cards"))
        .with_panel(
            _series(
                "Proposals", "reqps", _query(_rate("countersign_proposals_total", "result"), "{{result}}"), stacked=True
            )
        )
        .with_panel(
            _series(
                "Card transitions",
                "ops",
                _query(_rate("countersign_card_transitions_total", "transition", '{status="OK"}'), "{{transition}}"),
            )
        )
        .with_panel(
            _series(
                "Time to decision (p50, p90) by decision",
                "s",
                _query(_quantile(0.5, decision_seconds, "decision"), "p50 {{decision}}"),
                _query(_quantile(0.9, decision_seconds, "decision"), "p90 {{decision}}"),
            )
        )
        .with_panel(
            _series(
                "Write outcomes",
                "ops",
                _query(_rate("countersign_execution_latency_seconds_count", "outcome"), "{{outcome}}"),
                stacked=True,
            )
        )
        .with_row(dashboard_builder.Row("Queues"))
        .with_panel(
            _series(
                "Open cards by state",
                "short",
                _query("max by (state) (countersign_open_cards)", "{{state}}"),
                stacked=True,
            )
        )
        .with_panel(
            _series(
                "Worker lag and audit export backlog",
                "s",
                _query("max(countersign_worker_lag_seconds)", "worker lag"),
                _query("max(countersign_audit_export_backlog_seconds)", "audit export backlog"),
            )
        )
        .with_row(dashboard_builder.Row("Backends and Redis"))
        .with_panel(
            _series(
                "Backend requests by status class",
                "reqps",
                _query(
                    _rate("countersign_backend_requests_total", "adapter, status_class"), "{{adapter}} {{status_class}}"
                ),
            )
        )
        .with_panel(
            _series(
                "Backend latency (p90) by adapter",
                "s",
                _query(_quantile(0.9, "countersign_backend_request_duration_seconds", "adapter"), "{{adapter}}"),
            )
        )
        .with_panel(
            _series(
                "Ledger durable by gateway (Redis reachable, AOF on, no eviction)",
                "bool_yes_no",
                _query("countersign_ledger_durable", "{{instance}}"),
            )
        )
        .with_panel(
            _series(
                "Worker steps by result",
                "ops",
                _query(_rate("countersign_worker_steps_total", "step, result"), "{{step}} {{result}}"),
            )
        )
    )


def dashboard_json() -> str:
    """The dashboard as Grafana provisions it: JSON, keys sorted, two-space indented, one trailing newline."""
    return json.dumps(_build().build(), cls=JSONEncoder, sort_keys=True, indent=2) + "\n"


def queries() -> list[str]:
    """Every PromQL expression of the dashboard's panels, in order."""
    model = json.loads(dashboard_json())
    return [target["expr"] for panel in model["panels"] for target in panel.get("targets", [])]


if __name__ == "__main__":
    PATH.write_text(dashboard_json())
    print(f"wrote {PATH}")
