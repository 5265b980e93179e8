"""The gateway's Prometheus instruments, and the text a scrape of ``/metrics`` gets.

Who calls it: the few points every call already passes through, so counting is one line at each:
the agent path's single audit point (tool calls, proposals), the audit sink (every refusal by its
code, rate-limit refusals among them), the ledger's single script runner (card transitions,
approval and execution latency), the worker (its steps) and the backend client (requests by
adapter and status class). The gauges that describe shared state (open cards by state, worker
lag, ledger durability) are read at scrape time by the ``/metrics`` endpoint, which hands them to
`render`.

Instruments are process-wide, like loggers: one process serves one gateway, and this is the way
``prometheus_client`` documents. They live on this module's own `REGISTRY`, not the library's
global one, so nothing else a process imports appears in the gateway's scrape.

Labels are bounded by construction. None holds a card id, a subject, a key id or an argument.
A tool label is a served tool's name: the caller passes `UNKNOWN_TOOL` for a name the catalog does
not serve (an agent can send any string), and past `MAX_TOOL_LABELS` distinct names (registered
adapters add tools at run time) further names are counted as `OTHER_TOOL`. Codes, transitions,
steps and status classes come from the gateway's own vocabularies.

Cost: each count is a dict lookup of a cached child and an ``inc``/``observe`` (bench/telemetry_cost.py
measures a whole call's counting against the 20 µs budget).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = [
    "CONTENT_TYPE",
    "MAX_TOOL_LABELS",
    "OTHER_TOOL",
    "RATE_LIMIT_CODES",
    "REGISTRY",
    "UNKNOWN_TOOL",
    "Gauges",
    "count_approval_decided",
    "count_backend_request",
    "count_edge_refusal",
    "count_execution_finished",
    "count_proposal",
    "count_refusal",
    "count_tool_call",
    "count_transition",
    "count_upstream_call_made_again",
    "render",
    "serve_metrics",
    "set_audit_export_backlog",
    "upstream_session",
    "worker_step",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UNKNOWN_TOOL = "unknown"
"""The tool label of a call naming a tool the catalog does not serve."""
OTHER_TOOL = "other"
"""The tool label of every served tool past the first `MAX_TOOL_LABELS` seen."""
MAX_TOOL_LABELS = 500
"""Distinct tool labels one process keeps: far above a catalog's size, far below what hurts a TSDB."""
RATE_LIMIT_CODES = frozenset({"RATE_LIMITED", "QUOTA_EXCEEDED"})

REGISTRY = CollectorRegistry(auto_describe=True)
# The library's `_created` series would double every counter's lines and tell a scraper nothing it needs.
disable_created_metrics()  # type: ignore[no-untyped-call]

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_HUMAN = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0)

_tool_calls = Counter(
    "countersign_tool_calls",
    "Tool calls by agents, by tool and outcome code (OK on success).",
    ["tool", "code"],
    registry=REGISTRY,
)
_tool_seconds = Histogram(
    "countersign_tool_call_duration_seconds",
    "Time from a tools/call reaching the executor to its answer.",
    ["tool"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
_proposals = Counter(
    "countersign_proposals",
    "Write proposals: a new card (created) or the open one returned again (existing).",
    ["tool", "result"],
    registry=REGISTRY,
)
_transitions = Counter(
    "countersign_card_transitions",
    "Ledger scripts run, by transition (script) and its answer.",
    ["transition", "status"],
    registry=REGISTRY,
)
_approval_seconds = Histogram(
    "countersign_approval_latency_seconds",
    "Card created -> decided (approved, rejected, cancelled, expired).",
    ["decision"],
    buckets=_HUMAN,
    registry=REGISTRY,
)
_execution_seconds = Histogram(
    "countersign_execution_latency_seconds",
    "Card approved -> outcome recorded (SUCCEEDED, FAILED, UNKNOWN) or handed to a person (NEEDS_RECONCILIATION).",
    ["outcome"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
_backend = Counter(
    "countersign_backend_requests",
    "Requests to business backends, by adapter and status class (2xx..5xx, error).",
    ["adapter", "status_class"],
    registry=REGISTRY,
)
_backend_seconds = Histogram(
    "countersign_backend_request_duration_seconds",
    "Time a backend took to answer (or fail).",
    ["adapter"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
_upstream_sessions = Gauge(
    "countersign_upstream_sessions_open",
    "Sessions open now to each fronted MCP server (its pool: several over HTTP, one over stdio).",
    ["upstream"],
    registry=REGISTRY,
)
_upstream_opened = Counter(
    "countersign_upstream_sessions_opened",
    "Sessions opened to each fronted MCP server, reconnects included.",
    ["upstream"],
    registry=REGISTRY,
)
_upstream_again = Counter(
    "countersign_upstream_calls_made_again",
    "Calls to a fronted MCP server made again on another session: the first was refused before it ran.",
    ["upstream"],
    registry=REGISTRY,
)
_refusals = Counter(
    "countersign_refusals",
    "Audited refusals and failures, by audit action and stable code.",
    ["action", "code"],
    registry=REGISTRY,
)
_rate_limited = Counter(
    "countersign_rate_limit_refusals",
    "Refusals by a rate budget or quota (RATE_LIMITED, QUOTA_EXCEEDED).",
    ["code"],
    registry=REGISTRY,
)
_edge_refusals = Counter(
    "countersign_mcp_edge_refusals",
    "tools/call answered at the MCP edge, before the SDK and the executor, by code.",
    ["code"],
    registry=REGISTRY,
)
_worker_steps = Counter(
    "countersign_worker_steps",
    "Worker steps run, by step and how they ended (ok, error).",
    ["step", "result"],
    registry=REGISTRY,
)
_worker_seconds = Histogram(
    "countersign_worker_step_duration_seconds",
    "Time one worker step took.",
    ["step"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
_audit_export_backlog = Gauge(
    "countersign_audit_export_backlog_seconds",
    "Age of the oldest audit entry the export receiver has not taken, at this process's last export round (0: none).",
    registry=REGISTRY,
)

# Children are cached by their label values: `labels()` takes a lock and validates on every call.
_children: dict[tuple[Any, ...], Any] = {}
_tools: set[str] = set()


def _child(metric: Any, *values: str) -> Any:
    key = (metric, *values)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*values)
    return child


def _tool(name: str) -> str:
    if name in _tools or name == UNKNOWN_TOOL:
        return name
    if len(_tools) >= MAX_TOOL_LABELS:
        return OTHER_TOOL
    _tools.add(name)
    return name


def count_tool_call(tool: str, code: str, seconds: float) -> None:
    """One agent call answered: `tool` is a served tool's name or `UNKNOWN_TOOL`; `code` is ``OK`` or a `Code`."""
    label = _tool(tool)
    _child(_tool_calls, label, code or "OK").inc()
    _child(_tool_seconds, label).observe(seconds)


def count_proposal(tool: str, *, existing: bool) -> None:
    _child(_proposals, _tool(tool), "existing" if existing else "created").inc()


def count_refusal(action: str, code: str, refusals: int = 1) -> None:
    """An audited event carrying a code (`action` is the gateway's own audit action, e.g. ``tool.call``),
    standing for `refusals` refusals (more than one for an aggregated event, `gateway.mcp.flood_audit`)."""
    _child(_refusals, action, code).inc(refusals)
    if code in RATE_LIMIT_CODES:
        _child(_rate_limited, code).inc(refusals)


def count_edge_refusal(code: str) -> None:
    """A ``tools/call`` the MCP edge answered itself (it reached neither the SDK nor the executor, so
    `count_tool_call` does not count it; its audit event, aggregated, counts it in `count_refusal`)."""
    _child(_edge_refusals, code).inc()


def count_transition(name: str, status: str) -> None:
    _child(_transitions, name, status).inc()


def count_approval_decided(decision: str, seconds: float) -> None:
    _child(_approval_seconds, decision).observe(max(seconds, 0.0))


def count_execution_finished(outcome: str, seconds: float) -> None:
    _child(_execution_seconds, outcome).observe(max(seconds, 0.0))


def count_backend_request(adapter: str, status: int | None, seconds: float) -> None:
    """One backend request; `status` None means no HTTP answer (connect failure, timeout, broken connection)."""
    _child(_backend, adapter, f"{status // 100}xx" if status is not None else "error").inc()
    _child(_backend_seconds, adapter).observe(seconds)


def upstream_session(upstream: str, *, opened: bool) -> None:
    """A session to the fronted MCP server `upstream` opened (counted, and open) or ended (no longer open)."""
    if opened:
        _child(_upstream_opened, upstream).inc()
        _child(_upstream_sessions, upstream).inc()
    else:
        _child(_upstream_sessions, upstream).dec()


def count_upstream_call_made_again(upstream: str) -> None:
    """A call to `upstream` made again on another session, the first having been refused before it ran."""
    _child(_upstream_again, upstream).inc()


def set_audit_export_backlog(seconds: float) -> None:
    """The live audit export's lag: the age of the oldest entry not yet acknowledged, 0 when it is caught up."""
    _audit_export_backlog.set(max(seconds, 0.0))


@contextmanager
def worker_step(step: str) -> Iterator[None]:
    """Count and time one worker step (``run_approved``, ``reconcile``, ``sweep``); an exception counts as error."""
    started = time.perf_counter()
    result = "error"
    try:
        yield
        result = "ok"
    finally:
        _child(_worker_steps, step, result).inc()
        _child(_worker_seconds, step).observe(time.perf_counter() - started)


class Gauges(Collector):
    """Shared state read at scrape time: open cards by state, worker lag, ledger durability.

    `open_cards` and `worker_lag_seconds` are None when Redis could not be read: those gauges are then
    left out of the scrape (absent, rather than a zero that would read as "all is well")."""

    def __init__(
        self, *, open_cards: Mapping[str, int] | None, worker_lag_seconds: float | None, ledger_durable: bool
    ) -> None:
        self._open = open_cards
        self._lag = worker_lag_seconds
        self._durable = ledger_durable

    def collect(self) -> Iterable[GaugeMetricFamily]:
        if self._open is not None:
            cards = GaugeMetricFamily("countersign_open_cards", "Cards not yet final, by state.", labels=["state"])
            for state, count in sorted(self._open.items()):
                cards.add_metric([state], count)
            yield cards
        if self._lag is not None:
            yield GaugeMetricFamily(
                "countersign_worker_lag_seconds",
                "Age of the oldest approved card no worker has claimed yet (0: none).",
                value=self._lag,
            )
        yield GaugeMetricFamily(
            "countersign_ledger_durable",
            "1 while the ledger is reachable and durable (writes allowed), else 0.",
            value=1.0 if self._durable else 0.0,
        )


def render(gauges: Gauges | None = None) -> bytes:
    """The Prometheus text exposition of every instrument, and of `gauges` when given."""
    text = generate_latest(REGISTRY)
    if gauges is None:
        return text
    scrape = CollectorRegistry(auto_describe=False)
    scrape.register(gauges)
    return text + generate_latest(scrape)


def serve_metrics(port: int, host: str = "127.0.0.1") -> Callable[[], None]:
    """Serve this process's instruments on ``http://host:port/`` from a thread (`countersign worker`, which
    has no HTTP surface of its own); loopback by default, since this server checks no token. Returns the stop.

    Raises:
        OSError: the port cannot be bound.
    """
    server, thread = start_http_server(port, addr=host, registry=REGISTRY)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop
