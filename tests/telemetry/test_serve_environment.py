"""`countersign serve` configured only by environment variables: OTLP traces to a real receiver, JSON logs.

The receiver is a real HTTP server speaking OTLP/HTTP (protobuf), as a collector would; the gateway is
a real process started the way an operator starts it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from backends.serve import serve_app_in_thread
from tests.support.agents import agent
from tests.support.redis_server import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def _receiver(received: list[ExportTraceServiceRequest]) -> Starlette:
    async def traces(request: Request) -> Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.body())
        received.append(message)
        return Response(b"", media_type="application/x-protobuf")

    return Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])


def _spans(received: list[ExportTraceServiceRequest]) -> list[tuple[str, str, dict[str, Any]]]:
    """(service.name, span name, attributes) of every span received."""
    found = []
    for message in received:
        for resource_spans in message.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    attributes = {a.key: a.value.string_value or a.value.int_value for a in span.attributes}
                    found.append((resource.get("service.name", ""), span.name, attributes))
    return found


async def test_otel_variables_send_the_gateways_spans_to_an_otlp_receiver(tmp_path: Path) -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_SERVICE_NAME are all it takes; the log is JSON lines on stderr."""
    received: list[ExportTraceServiceRequest] = []
    port = free_port()
    with serve_app_in_thread(_receiver(received)) as collector:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("COUNTERSIGN_", "OTEL_"))}
        env |= {
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector,
            "OTEL_SERVICE_NAME": "countersign-under-test",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "COUNTERSIGN_LOG_FORMAT": "json",
        }
        out, err = (tmp_path / "serve.out").open("w+"), (tmp_path / "serve.err").open("w+")
        process = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--port", str(port)], cwd=tmp_path,
                                   env=env, stdout=out, stderr=err)  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while "Press Ctrl-C" not in (tmp_path / "serve.out").read_text():
                assert process.poll() is None, (tmp_path / "serve.err").read_text()
                assert time.monotonic() < deadline, "serve did not start"
                time.sleep(0.05)
            key = (tmp_path / ".countersign" / "demo-agent.key").read_text().strip()
            async with agent(f"http://127.0.0.1:{port}/mcp", key) as client:
                result = await client.call_tool("rooms_availability", {"room_id": "room-eos", "date": "2026-12-30"})
            assert not result.is_error
            deadline = time.monotonic() + 15
            while not any(name == "tools/call rooms_availability" for _, name, _ in _spans(received)):
                assert time.monotonic() < deadline, _spans(received)
                time.sleep(0.05)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            finally:
                if process.poll() is None:
                    process.kill()
                out.close()
                err.close()
    spans = _spans(received)
    [call] = [s for s in spans if s[1] == "tools/call rooms_availability"]
    assert call[0] == "countersign-under-test"
    assert call[2]["mcp.method.name"] == "tools/call" and call[2]["gen_ai.tool.name"] == "rooms_availability"
    assert any(name == "GET" and attributes.get("countersign.adapter") == "rooms" for _, name, attributes in spans)
    lines = [json.loads(line) for line in (tmp_path / "serve.err").read_text().splitlines()]
    assert lines and all({"timestamp", "level", "logger", "message"} <= set(line) for line in lines)
    assert any(line["message"] == "ledger is durable; writes are enabled" for line in lines)
