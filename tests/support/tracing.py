"""An in-memory span exporter installed as the process's tracer provider, recording only when asked.

The OpenTelemetry API lets a process set its tracer provider once, so the first test that needs
spans installs one for the rest of the session; spans are kept only inside `recording()`, so the
tests that do not look at spans neither see nor pile up anyone's."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator


class _Recorder(SpanExporter):
    def __init__(self) -> None:
        self.on = False
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.on:
            self.spans.extend(spans)
        return SpanExportResult.SUCCESS


_RECORDER = _Recorder()


class _OwnIds(IdGenerator):
    """Ids from a generator of its own: the SDK's default draws on the `random` module, and a gateway thread
    making spans while hypothesis draws an example would look to hypothesis like a strategy using it."""

    def __init__(self) -> None:
        self._random = random.Random()

    def generate_span_id(self) -> int:
        return self._random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._random.getrandbits(128) or 1


@contextmanager
def recording() -> Iterator[list[ReadableSpan]]:
    """Every span that ends inside the block, in the order they ended (a live list)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider(id_generator=_OwnIds())
        provider.add_span_processor(SimpleSpanProcessor(_RECORDER))
        trace.set_tracer_provider(provider)
    _RECORDER.spans = []
    _RECORDER.on = True
    try:
        yield _RECORDER.spans
    finally:
        _RECORDER.on = False
