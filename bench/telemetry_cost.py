"""What counting and tracing cost per call, in-process: metrics, tracing off (no exporter) and tracing on.

Each variant replays exactly the telemetry calls the gateway makes for one call of a kind, with the
gateway's own functions, in a tight loop: a ``read`` tools/call (the tool-call count and histogram, one
backend request, the SDK's MCP span and the backend span with its ``traceparent``), a write
``proposal`` (its preflight GET, the ledger's propose script, the proposal count) and an approved
write's ``execution`` by the worker (claim, dispatch, the backend POST, complete, the step's count
and the latency histograms). Timings are CPU time (``time.process_time``) per call, the median of `--rounds` rounds of
`--calls` calls each, so a busy neighbour on the core moves them less than wall time would.

Tracing "off" is the process as it runs with no ``OTEL_*`` exporter: the API's no-op tracer. "On"
installs the SDK's tracer provider with a batch processor and an exporter that drops every batch, so
it measures the span work the gateway does, not a collector's network. The API allows one provider
per process, so "off" runs before "on".

Run: ``python bench/telemetry_cost.py [--rounds 7] [--calls 20000]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp.shared._otel import otel_span
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from gateway.telemetry import metrics
from gateway.telemetry.tracing import annotate, inject, installed, span

BUDGET_US = 20.0
"""The per-call budget of counting (the issue's figure)."""


def read_metrics() -> None:
    metrics.count_backend_request("rooms", 200, 0.0004)
    metrics.count_tool_call("rooms_availability", "", 0.0012)


def proposal_metrics() -> None:
    metrics.count_backend_request("rooms", 200, 0.0004)  # preflight
    metrics.count_transition("propose", "OK")
    metrics.count_proposal("rooms_book", existing=False)
    metrics.count_tool_call("rooms_book", "", 0.0015)


def execution_metrics() -> None:
    """The worker's run of an approved card: claim, dispatch, the backend POST, complete."""
    with metrics.worker_step("run_approved"):
        metrics.count_transition("claim", "OK")
        metrics.count_transition("dispatch", "OK")
        metrics.count_backend_request("rooms", 201, 0.0005)
        metrics.count_transition("complete", "OK")
        metrics.count_execution_finished("SUCCEEDED", 0.003)


def _mcp_span(tool: str) -> AbstractContextManager[object]:
    """The SDK's span per MCP message; the surface leaves it out while no tracer provider is installed."""
    if not installed():
        return nullcontext()
    attributes = {
        "mcp.method.name": "tools/call",
        "mcp.protocol.version": "2026-07-28",
        "jsonrpc.request.id": "7",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
    }
    return otel_span(
        f"tools/call {tool}",
        kind=SpanKind.SERVER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )


def _backend_span(method: str) -> None:
    attributes: dict[str, str | int | bool] = {
        "http.request.method": method,
        "server.address": "127.0.0.1",
        "server.port": 8001,
        "url.path": "/availability",
        "countersign.adapter": "rooms",
    }
    with span(method, kind=SpanKind.CLIENT, attributes=attributes) as current:
        headers = {"authorization": "Bearer x"}
        inject(headers)
        current.set_attribute("http.response.status_code", 200)


CARD = "crd_1_0123456789abcdef0123456789abcdef"


def read_tracing() -> None:
    with _mcp_span("rooms_availability"):
        _backend_span("GET")
        annotate(code="")


def proposal_tracing() -> None:
    with _mcp_span("rooms_book"):
        _backend_span("GET")
        with span("ledger propose", card_id=CARD):
            pass
        annotate(card_id=CARD)


def execution_tracing() -> None:
    with span("worker run_approved", card_id=CARD, root=True):
        for name in ("claim", "dispatch"):
            with span(f"ledger {name}", card_id=CARD):
                pass
        _backend_span("POST")
        with span("ledger complete", card_id=CARD):
            pass
        annotate(card_id=CARD)


KINDS = (("read", "read call"), ("proposal", "write proposal"), ("execution", "approved write's run"))


def _per_call_us(step: Callable[[], None], calls: int, rounds: int) -> tuple[float, float, float]:
    for _ in range(min(calls, 2000)):  # warm the caches (children, tracer) outside the measure
        step()
    results = []
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(calls):
            step()
        results.append((time.process_time() - started) / calls * 1e6)
    return statistics.median(results), min(results), max(results)


def _baseline(calls: int, rounds: int) -> float:
    return _per_call_us(lambda: None, calls, rounds)[0]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args(argv)
    empty = _baseline(args.calls, args.rounds)
    steps = globals()
    rows: list[tuple[str, tuple[float, float, float]]] = []
    for kind, label in KINDS:
        rows.append((f"metrics, {label}", _per_call_us(steps[f"{kind}_metrics"], args.calls, args.rounds)))
    for kind, label in KINDS:
        rows.append((f"tracing off, {label}", _per_call_us(steps[f"{kind}_tracing"], args.calls, args.rounds)))

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropped(SpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped(), max_queue_size=65_536))
    trace.set_tracer_provider(provider)
    for kind, label in KINDS:
        rows.append((f"tracing on, {label}", _per_call_us(steps[f"{kind}_tracing"], args.calls, args.rounds)))
    provider.shutdown()

    print(
        f"CPU µs per call, median of {args.rounds} rounds x {args.calls:,} calls [min-max]; loop overhead "
        f"{empty:.2f} µs subtracted"
    )
    for label, (median, low, high) in rows:
        print(f"  {label:<36} {median - empty:7.2f}  [{low - empty:.2f}-{high - empty:.2f}]")
    worst = max(median - empty for label, (median, _, _) in rows if label.startswith("metrics"))
    verdict = "PASS" if worst <= BUDGET_US else "MISS"
    print(f"Target: counting <= {BUDGET_US:g} µs per call: worst {worst:.2f} µs  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
