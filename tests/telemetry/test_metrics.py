"""``/metrics`` end to end: a real gateway under uvicorn, a real MCP client, the text parsed by prometheus_client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis
from starlette.datastructures import Secret

from backends.serve import serve_app_in_thread
from gateway.cards.card import CardState
from gateway.principal import KeyKind, Principal
from gateway.runtime.app import create_app
from gateway.store.ledger.codec import decode_card
from gateway.store.ledger.redis_ledger import RedisLedger
from gateway.store.probes import LedgerProbe
from gateway.telemetry import metrics
from tests.support.agents import agent, error_code, make_key, payload
from tests.support.cards import PROPOSAL, approve
from tests.support.examples import examples
from tests.support.executors import agent_path
from tests.support.services import Backend, gateway_settings
from tests.support.tools import read_tool

pytestmark = pytest.mark.anyio

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _samples(text: str) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def _now() -> Samples:
    return _samples(metrics.render().decode())


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def _booking(day: str) -> dict[str, Any]:
    return {"room_id": "room-eos", "date": day, "start": "09:00", "end": "10:00", "title": "Metrics"}


@pytest.fixture
def gateway(redis_url: str, backends: dict[str, Backend]) -> Iterator[str]:
    """A fresh gateway with its worker (its scrape-time gauges have no cached answer yet)."""
    with serve_app_in_thread(create_app(gateway_settings(redis_url, backends)), lifespan=True) as base:
        yield base


async def _settled(redis: Redis, card_id: str) -> CardState:
    ledger = RedisLedger(redis)
    with anyio.fail_after(15):
        while True:
            card = await ledger.get(card_id)
            if card is not None and card.state in (CardState.SUCCEEDED, CardState.FAILED):
                return card.state
            await anyio.sleep(0.05)


async def test_a_read_a_refusal_and_a_write_from_proposal_to_outcome_are_counted(redis: Redis, gateway: str) -> None:
    """Each step of one agent's work moves its own counter, histogram or gauge, and the scrape parses."""
    before = _now()
    token = await make_key(redis, roles=("staff",))
    admin = await make_key(redis, kind=KeyKind.ADMIN, roles=("approver",), subject="root@acme.example")
    async with agent(f"{gateway}/mcp", token) as client:
        read = await client.call_tool("rooms_availability", {"room_id": "room-eos", "date": "2026-12-20"})
        assert not read.is_error
        assert error_code(await client.call_tool("no_such_tool", {})) == "PERMISSION_DENIED"
        done = payload(await client.call_tool("rooms_book", _booking("2026-12-21")))
        pending = payload(await client.call_tool("rooms_book", _booking("2026-12-22")))
    card = await RedisLedger(redis).get(done["card_id"])
    assert card is not None
    async with httpx.AsyncClient(base_url=gateway, headers={"authorization": f"Bearer {admin}"}) as http:
        body = {"version": card.version, "args_hash": card.args_hash, "comment": "ok"}
        answer = await http.post(f"/admin/api/cards/{card.card_id}/approve", json=body)
        assert answer.status_code == 200, answer.text
        assert await _settled(redis, card.card_id) is CardState.SUCCEEDED
        scrape = await http.get("/metrics")
    assert scrape.status_code == 200
    assert scrape.headers["content-type"].startswith("text/plain; version=0.0.4")
    after = _samples(scrape.text)

    def grew(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert grew("countersign_tool_calls_total", tool="rooms_availability", code="OK") == 1
    assert grew("countersign_tool_call_duration_seconds_count", tool="rooms_availability") == 1
    assert grew("countersign_tool_calls_total", tool="unknown", code="PERMISSION_DENIED") == 1
    assert grew("countersign_refusals_total", action="tool.call", code="PERMISSION_DENIED") == 1
    assert grew("countersign_proposals_total", tool="rooms_book", result="created") == 2
    for transition in ("propose", "approve", "claim", "dispatch", "complete"):
        assert grew("countersign_card_transitions_total", transition=transition, status="OK") >= 1, transition
    assert grew("countersign_approval_latency_seconds_count", decision="approved") == 1
    assert grew("countersign_execution_latency_seconds_count", outcome="SUCCEEDED") == 1
    # The read, both preflights and the booking itself reached the rooms backend.
    assert grew("countersign_backend_requests_total", adapter="rooms", status_class="2xx") >= 4
    assert grew("countersign_worker_steps_total", step="run_approved", result="ok") >= 1
    assert _value(after, "countersign_ledger_durable") == 1
    assert _value(after, "countersign_open_cards", state="PENDING") == 1  # `pending`, still waiting
    assert _value(after, "countersign_open_cards", state="APPROVED") == 0
    assert _value(after, "countersign_worker_lag_seconds") == 0
    assert pending["card_id"] not in scrape.text and card.card_id not in scrape.text


async def test_open_cards_and_worker_lag_are_read_from_the_ledger(quiet: Redis) -> None:
    """Worker lag is the age of the oldest approved card still waiting for a worker, by the Redis clock."""
    redis = quiet
    ledger = RedisLedger(redis)
    cards = [await ledger.propose(replace(PROPOSAL, dedupe_key=f"metrics-{n}")) for n in range(3)]
    waiting = cards[0].card
    assert waiting is not None
    await approve(ledger, waiting.card_id)
    # Make the approval a minute old, as a worker that stopped a minute ago would leave it.
    key = RedisLedger._keys(waiting.card_id, int(waiting.card_id.split("_")[1]))[0]
    stored = decode_card(await redis.get(key), waiting.card_id)  # written back in the long form, read as well
    stored["approved_ms"] = str(int(stored["approved_ms"]) - 60_000)
    await redis.set(key, json.dumps(stored))
    values = await LedgerProbe(redis, cache_seconds=0).gauges()
    assert values.open_cards == {"PENDING": 2, "APPROVED": 1, "EXECUTING": 0, "UNKNOWN": 0}
    assert 60 <= values.worker_lag_seconds < 90


async def _scrape(app: Any, peer: str, headers: dict[str, str] | None = None) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, client=(peer, 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        return await http.get("/metrics", headers=headers or {})


async def test_without_a_token_metrics_answer_only_loopback_peers_and_refusals_are_audited(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """A peer off the host is refused with a stable code, as JSON, and the refusal is in the audit trail."""
    app = create_app(gateway_settings(redis_url, backends))
    try:
        refused = await _scrape(app, "203.0.113.7")
        assert refused.status_code == 403
        assert refused.json()["error"] == "PERMISSION_DENIED"
        assert (await _scrape(app, "127.0.0.1")).status_code == 200
        assert (await _scrape(app, "::1")).status_code == 200
        [event] = [e for e in await app.state.gateway.audit.recent(20) if e.action == "metrics.scrape"]
    finally:
        await app.state.gateway.aclose()
    assert (event.outcome, event.code, event.extra["client"]) == ("deny", "PERMISSION_DENIED", "203.0.113.7")


async def test_with_a_token_metrics_require_it_from_every_peer(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """Once a token is configured, loopback is no pass: a proxy on the host would make every peer loopback."""
    token = "metrics-token-0123456789"
    app = create_app(replace(gateway_settings(redis_url, backends), metrics_token=Secret(token)))
    try:
        assert (await _scrape(app, "127.0.0.1")).status_code == 403
        assert (await _scrape(app, "203.0.113.7", {"authorization": "Bearer wrong"})).status_code == 403
        allowed = await _scrape(app, "203.0.113.7", {"authorization": f"Bearer {token}"})
    finally:
        await app.state.gateway.aclose()
    assert allowed.status_code == 200
    assert "countersign_ledger_durable" in allowed.text


def _tool_labels() -> set[str]:
    return {
        sample.labels["tool"]
        for family in metrics.REGISTRY.collect()
        for sample in family.samples
        if "tool" in sample.labels
    }


AGENT = Principal(key_id="key-1", subject="alice@acme.example", org="acme", roles=frozenset({"staff"}),
                  kind=KeyKind.AGENT)  # fmt: skip


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(min_size=1, max_size=80))
async def test_a_tool_name_an_agent_makes_up_never_becomes_a_label(name: str) -> None:
    """Any string sent as a tool name is counted as ``unknown``: labels stay bounded by the catalog."""
    executor, _audit = agent_path(read_tool("demo_echo"), clients={})
    if name == "demo_echo":
        return
    labels = _tool_labels()
    before = _value(_now(), "countersign_tool_calls_total", tool="unknown", code="PERMISSION_DENIED")
    await executor.execute(AGENT, name, {})
    after = _value(_now(), "countersign_tool_calls_total", tool="unknown", code="PERMISSION_DENIED")
    assert after == before + 1
    # Labels are process-wide: a real tool's name may already be one from another test (Hypothesis also
    # draws names from the code's own string constants). The call itself adds no label.
    assert _tool_labels() - labels <= {"unknown"}


def test_served_tools_past_the_cap_share_one_label(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registered adapters can add tools at run time; past `MAX_TOOL_LABELS` names they count as ``other``."""
    monkeypatch.setattr(metrics, "_tools", set())
    monkeypatch.setattr(metrics, "MAX_TOOL_LABELS", 3)
    for n in range(5):
        metrics.count_tool_call(f"cap_tool_{n}", "OK", 0.001)
    labels = _tool_labels()
    assert {"cap_tool_0", "cap_tool_1", "cap_tool_2", "other"} <= labels
    assert "cap_tool_3" not in labels and "cap_tool_4" not in labels


@pytest.mark.parametrize("code", ["RATE_LIMITED", "QUOTA_EXCEEDED"])
async def test_a_rate_limit_refusal_is_counted_where_it_is_audited(code: str, redis: Redis) -> None:
    """Whichever layer refuses by budget or quota, its audit event is where the refusal is counted."""
    from gateway.audit.events import AuditEvent
    from gateway.store.audit_stream import RedisStreamAuditSink
    from tests.support.services import TEST_AUDIT_SECRET

    before = _now()
    sink = RedisStreamAuditSink(redis, secret=TEST_AUDIT_SECRET.encode())
    await sink.record(AuditEvent(action="tool.call", outcome="deny", tool="rooms_book", code=code, reason="budget"))
    after = _now()
    assert _value(after, "countersign_rate_limit_refusals_total", code=code) == (
        _value(before, "countersign_rate_limit_refusals_total", code=code) + 1
    )
    assert _value(after, "countersign_refusals_total", action="tool.call", code=code) == (
        _value(before, "countersign_refusals_total", action="tool.call", code=code) + 1
    )


def test_a_separate_worker_serves_its_instruments_on_loopback() -> None:
    """`countersign worker` has no HTTP surface: `serve_metrics` gives its counts a scrape of their own."""
    from tests.support.redis_server import free_port

    port = free_port()
    stop = metrics.serve_metrics(port)
    try:
        metrics.count_transition("claim", "OK")
        answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        stop()
    families = {family.name for family in text_string_to_metric_families(answer.text)}
    assert {
        "countersign_card_transitions",
        "countersign_worker_steps",
        "countersign_execution_latency_seconds",
    } <= families
    assert _value(_samples(answer.text), "countersign_card_transitions_total", transition="claim", status="OK") >= 1
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1)
