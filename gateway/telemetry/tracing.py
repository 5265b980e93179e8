"""OpenTelemetry traces: configured by the standard ``OTEL_*`` variables, a no-op until then.

Who calls it: ``python -m gateway`` calls `configure` once with the environment; the ledger, the
worker, the backend client, the agent path and the HTTP middleware open spans with `span` and
tag the current one with `annotate`. The MCP SDK opens the span of each MCP request itself
(``tools/call rooms_book``, kind SERVER, with ``mcp.method.name``, ``gen_ai.tool.name``,
``gen_ai.operation.name``, ``jsonrpc.request.id`` and ``error.type = tool_error`` on an ``isError``
result), parented on the trace context of the request's ``params._meta`` when it has one: the
executor's spans nest under it, and so does everything they call.

What `configure` reads (the SDK reads the rest itself): ``OTEL_SDK_DISABLED``, ``OTEL_TRACES_EXPORTER``
(``otlp``, ``console`` or ``none``; unset means ``otlp`` when an ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``
is set and ``none`` otherwise). The OTLP/HTTP exporter then takes its endpoint, headers and timeout
from ``OTEL_EXPORTER_OTLP_*``, the resource its name from ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES``, the sampler from ``OTEL_TRACES_SAMPLER``, the propagators from
``OTEL_PROPAGATORS`` (W3C trace context and baggage by default). With nothing configured, the API's
no-op tracer answers and nothing is imported from the SDK.

The card id of a span is ``countersign.card.id``; the stable code of a refusal ``countersign.code``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, StatusCode

__all__ = ["CARD_ID", "CODE", "annotate", "configure", "current_ids", "inject", "installed", "span", "tracer"]

logger = logging.getLogger(__name__)

CARD_ID = "countersign.card.id"
CODE = "countersign.code"

_CARD: ContextVar[str | None] = ContextVar("countersign_span_card", default=None)

tracer = trace.get_tracer("countersign")
"""A proxy: it follows whichever tracer provider is installed, so spans start recording once one is."""


def configure(environ: Mapping[str, str]) -> bool:
    """Install a tracer provider with the exporter the ``OTEL_*`` variables name. Returns whether one was.

    Raises:
        ValueError: an ``OTEL_TRACES_EXPORTER`` this gateway does not ship.
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    exporter_name = environ.get("OTEL_TRACES_EXPORTER", "otlp" if endpoint else "none").strip().lower()
    if exporter_name == "none":
        return False
    # Imported only here: a gateway without an exporter pays nothing for the SDK.
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    exporter: SpanExporter
    if exporter_name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    elif exporter_name == "console":
        exporter = ConsoleSpanExporter()
    else:
        raise ValueError(f"OTEL_TRACES_EXPORTER={exporter_name!r}: this gateway ships otlp, console and none")
    resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME", "countersign")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    logger.info("tracing to %s", endpoint or exporter_name)
    return True


def installed() -> bool:
    """Whether a tracer provider is installed (`configure`, or a test's); until then every span is a no-op."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


class _NoSpan:
    """What `span` returns while nothing is installed: the API's own no-op span still attaches and detaches a
    context, about 15 µs a span on this project's machines (bench/telemetry_cost.py); this costs nothing."""

    __slots__ = ()

    def __enter__(self) -> Span:
        return INVALID_SPAN

    def __exit__(self, *exc: object) -> None:
        return None


_NO_SPAN = _NoSpan()


def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, str | int | bool] | None = None,
    card_id: str | None = None,
    root: bool = False,
    within: bool = False,
) -> AbstractContextManager[Span]:
    """A span around a step, current while it runs; `root` starts a new trace whatever is current, and
    `within` makes one only inside another (a background poll then starts no trace of its own).

    The card id of a span is `card_id`, or else that of the nearest enclosing span that named one, so
    every step under a worker's run of a card (its backend call too) carries it. An exception ends the
    span with ``error.type`` (the exception's class) and ERROR status."""
    if not installed() or (within and not trace.get_current_span().get_span_context().is_valid):
        return _NO_SPAN
    return _span(name, kind, attributes, card_id or (None if root else _CARD.get()), root)


@contextmanager
def _span(
    name: str, kind: SpanKind, attributes: Mapping[str, str | int | bool] | None, card_id: str | None, root: bool
) -> Iterator[Span]:
    with tracer.start_as_current_span(
        name,
        context=Context() if root else None,
        kind=kind,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        token = None
        if card_id:
            current.set_attribute(CARD_ID, card_id)
            token = _CARD.set(card_id)
        try:
            yield current
        except BaseException as error:
            if current.is_recording():
                current.set_attribute("error.type", type(error).__qualname__)
                current.set_status(StatusCode.ERROR)
            raise
        finally:
            if token is not None:
                _CARD.reset(token)


def annotate(*, card_id: str | None = None, code: str | None = None) -> None:
    """Tag the current span (the SDK's MCP span inside a tools/call) with a card id or a refusal code."""
    current = trace.get_current_span()
    if not current.is_recording():
        return
    if card_id:
        current.set_attribute(CARD_ID, card_id)
    if code:
        current.set_attribute(CODE, code)


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current trace context (``traceparent``, ``tracestate``) to outgoing `headers`; none without a span."""
    if trace.get_current_span().get_span_context().is_valid:
        propagate.inject(headers)


def current_ids() -> tuple[str, str] | None:
    """The current trace and span ids as hex, or None outside a recorded span (for log records)."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")
