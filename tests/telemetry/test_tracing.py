"""Traces end to end: one proposal, its approval and its execution, each one connected trace with the card id.

A real gateway under uvicorn with its worker, the real MCP client (which puts its trace context in
``params._meta``), the real rooms backend (which records the ``traceparent`` it received), and an
in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import anyio
import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.cards.card import CardState
from gateway.principal import KeyKind
from gateway.runtime.app import create_app
from gateway.store.ledger.redis_ledger import RedisLedger
from gateway.telemetry.tracing import CARD_ID, configure
from tests.support.agents import agent, make_key, payload
from tests.support.services import Backend, gateway_settings
from tests.support.tracing import recording

pytestmark = pytest.mark.anyio


@pytest.fixture
def spans() -> Iterator[list[ReadableSpan]]:
    with recording() as ended:
        yield ended


def _trace_of(spans: Sequence[ReadableSpan], root: ReadableSpan) -> list[ReadableSpan]:
    assert root.context is not None
    return [s for s in spans if s.context is not None and s.context.trace_id == root.context.trace_id]


def _assert_connected(trace: Sequence[ReadableSpan]) -> None:
    """Exactly one span has no parent in the trace (its root); every other span's parent is in it."""
    ids = {s.context.span_id for s in trace if s.context is not None}
    orphans = [s.name for s in trace if s.parent is None or s.parent.span_id not in ids]
    assert len(orphans) == 1, orphans


def _one(spans: Sequence[ReadableSpan], name: str, card_id: str, kind: SpanKind | None = None) -> ReadableSpan:
    found = [s for s in spans if s.name == name and (s.attributes or {}).get(CARD_ID) == card_id]
    found = [s for s in found if kind is None or s.kind is kind]
    assert len(found) == 1, [(s.name, s.kind, dict(s.attributes or {})) for s in spans if s.name == name]
    return found[0]


async def _wait_for(spans: list[ReadableSpan], name: str, card_id: str) -> None:
    with anyio.fail_after(15):
        while not any(s.name == name and (s.attributes or {}).get(CARD_ID) == card_id for s in spans):
            await anyio.sleep(0.05)


async def test_proposal_approval_and_execution_are_each_one_connected_trace_with_the_card_id(
    redis: Redis, redis_url: str, backends: dict[str, Backend], spans: list[ReadableSpan]
) -> None:
    """Each request is one trace whose every span carries the card id it concerns; the backend got its traceparent."""
    token = await make_key(redis, roles=("staff",))
    admin = await make_key(redis, kind=KeyKind.ADMIN, roles=("approver",), subject="root@acme.example")
    booking = {"room_id": "room-eos", "date": "2026-12-23", "start": "09:00", "end": "10:00", "title": "Traced"}
    with serve_app_in_thread(create_app(gateway_settings(redis_url, backends)), lifespan=True) as base:
        async with agent(f"{base}/mcp", token) as client:
            card_id = payload(await client.call_tool("rooms_book", booking))["card_id"]
        card = await RedisLedger(redis).get(card_id)
        assert card is not None
        async with httpx.AsyncClient(base_url=base, headers={"authorization": f"Bearer {admin}"}) as http:
            body = {"version": card.version, "args_hash": card.args_hash, "comment": "ok"}
            assert (await http.post(f"/admin/api/cards/{card_id}/approve", json=body)).status_code == 200
        await _wait_for(spans, "ledger complete", card_id)

    # 1. The proposal: the client's span (from params._meta) -> the SDK's MCP span -> preflight and ledger.
    mcp = _one(spans, "tools/call rooms_book", card_id, SpanKind.SERVER)
    assert mcp.attributes is not None
    assert (mcp.attributes["mcp.method.name"], mcp.attributes["gen_ai.tool.name"]) == ("tools/call", "rooms_book")
    assert mcp.parent is not None and mcp.parent.is_remote  # accepted from the client's params._meta
    proposal = _trace_of(spans, mcp)
    _assert_connected(proposal)
    assert {"ledger propose", "GET"} <= {s.name for s in proposal}
    assert _one(proposal, "ledger propose", card_id).parent.span_id == mcp.context.span_id  # type: ignore[union-attr]
    client_side = [s for s in proposal if s.kind is SpanKind.CLIENT and s.name == "MCP send tools/call rooms_book"]
    assert client_side and mcp.parent.span_id == client_side[0].context.span_id  # type: ignore[union-attr]

    # 2. The approval: the admin request's span -> the approve script, both naming the card.
    http_span = _one(spans, "POST /admin/api", card_id, SpanKind.SERVER)
    approval = _trace_of(spans, http_span)
    _assert_connected(approval)
    assert _one(approval, "ledger approve", card_id).parent.span_id == http_span.context.span_id  # type: ignore[union-attr]
    assert http_span.attributes is not None and http_span.attributes["http.response.status_code"] == 200

    # 3. The execution: the worker's step is a trace of its own; the write went out with its traceparent.
    step = _one(spans, "worker run_approved", card_id)
    execution = _trace_of(spans, step)
    _assert_connected(execution)
    names = [s.name for s in execution]
    assert {"ledger claim", "ledger dispatch", "ledger complete", "POST"} <= set(names)
    for span in execution:  # the backend call too: it inherits the card of the step it runs in
        assert (span.attributes or {}).get(CARD_ID) == card_id, span.name
    [post] = [s for s in execution if s.name == "POST"]
    assert post.attributes is not None and post.attributes["countersign.adapter"] == "rooms"
    assert post.attributes["http.response.status_code"] in (200, 201)
    requests = backends["rooms"].app.state.service.requests
    [sent] = [r for r in requests if r.method == "POST" and r.headers.get("idempotency-key") == card.idempotency_key]
    assert step.context is not None
    assert sent.headers["traceparent"].split("-")[1] == format(step.context.trace_id, "032x")
    final = await RedisLedger(redis).get(card_id)
    assert final is not None and final.state is CardState.SUCCEEDED


def test_without_an_exporter_configured_no_provider_is_installed() -> None:
    """No ``OTEL_*`` exporter, or the SDK disabled: tracing stays the API's no-op; an unknown exporter is refused."""
    assert configure({}) is False
    assert configure({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}) is False
    assert configure({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}) is False
    with pytest.raises(ValueError):
        configure({"OTEL_TRACES_EXPORTER": "zipkin"})


TRACE_IN_HEADER = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
TRACE_IN_META = "00-" + "c" * 32 + "-" + "d" * 16 + "-01"


@pytest.mark.parametrize(("meta", "expected"), [(None, "a" * 32), (TRACE_IN_META, "c" * 32)])
async def test_mcp_span_takes_params_meta_trace_context_else_the_http_traceparent(
    meta: str | None, expected: str, redis: Redis, redis_url: str, backends: dict[str, Backend],
    spans: list[ReadableSpan],
) -> None:  # fmt: skip
    """``params._meta`` wins (the MCP conventions); a client that only sets the HTTP header is still joined."""
    from bench._load import _META, ARGUMENTS, TOOL, modern_headers

    token = await make_key(redis, roles=("staff",))
    params = {"name": TOOL, "arguments": ARGUMENTS, "_meta": {**_META, **({"traceparent": meta} if meta else {})}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    with serve_app_in_thread(create_app(gateway_settings(redis_url, backends)), lifespan=True) as base:
        async with httpx.AsyncClient(base_url=base) as http:
            answer = await http.post(
                "/mcp", json=body, headers={**modern_headers(token), "traceparent": TRACE_IN_HEADER}
            )
    assert answer.status_code == 200, answer.text
    [server] = [s for s in spans if s.name == f"tools/call {TOOL}" and s.kind is SpanKind.SERVER]
    assert server.context is not None and format(server.context.trace_id, "032x") == expected
    [backend] = [s for s in _trace_of(spans, server) if s.name == "GET"]
    assert backend.parent is not None and backend.parent.span_id == server.context.span_id
