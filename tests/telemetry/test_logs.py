"""Logs: one JSON object per line with trace and key ids, timestamped plain lines, and never a credential.

The credential test runs the demo flow in this process over real HTTP (the demo backends and the
expenses service `countersign serve` starts, a real MCP client, the admin API, the worker) with JSON
logs and the access log on, then looks for every key and secret minted along the way in what was
logged."""

from __future__ import annotations

import io
import json
import logging
import re
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio import Redis
from starlette.datastructures import Secret

from backends.serve import serve_app_in_thread
from gateway.audit.secret import SECRET_FILE, audit_secret
from gateway.cards.card import CardState
from gateway.config.settings import Settings
from gateway.principal import KeyKind
from gateway.runtime.app import create_app
from gateway.runtime.demo import ensure_signing_key, register_demo_manifest
from gateway.runtime.serve import resolved
from gateway.store.keys import KeyStore
from gateway.store.ledger.redis_ledger import RedisLedger
from gateway.store.signing_keys import SigningKeyStore
from gateway.telemetry.log_context import bind_key_id
from gateway.telemetry.logs import configure_logging
from gateway.telemetry.tracing import tracer
from tests.support.agents import agent, payload
from tests.support.redis_server import flushed_client, free_port, start_redis_server
from tests.support.tracing import recording

pytestmark = pytest.mark.anyio

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The gateway's logging, configured as `serve` does, into a buffer; the test's logging restored after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in ("gateway", "countersign", "backends",
                                                                 "countersign.access")}  # fmt: skip
    buffer = io.StringIO()
    yield buffer
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)


@pytest.fixture
def fresh_redis_url() -> Iterator[str]:
    """A durable server of this test's own, empty: what `countersign serve` finds on a fresh machine."""
    with start_redis_server(appendonly=True) as url:
        yield url


@pytest.fixture
async def fresh_redis(fresh_redis_url: str) -> AsyncIterator[Redis]:
    async with flushed_client(fresh_redis_url) as client:  # flushing an empty server changes nothing
        yield client


async def test_a_demo_flow_logs_json_lines_with_ids_and_no_key_or_secret(
    fresh_redis: Redis, fresh_redis_url: str, tmp_path: Path, captured: io.StringIO
) -> None:
    """Every line is a JSON object with the standard fields; access lines name the key id; no credential
    minted in the flow (keys, backend tokens, signing keys, the audit secret, the metrics token) appears.

    The demo runs on a server of its own, as on a fresh machine: it mints its audit secret and then
    its first signing key under it (the shared test server holds a key stored under the tests' secret, which a
    demo's own secret could not read: its approved card would wait for a key it can sign with)."""
    redis = fresh_redis
    metrics_token = secrets.token_urlsafe(24)
    settings = Settings(redis_url=fresh_redis_url, demo=True, port=free_port(), data_dir=tmp_path,
                        metrics_token=Secret(metrics_token), log_format="json", access_log=True)  # fmt: skip
    configure_logging("json", access_log=True, stream=captured)
    store = KeyStore(redis)
    agent_token, agent_record = await store.create(kind=KeyKind.AGENT, subject="demo@acme.example", org="acme",
                                                   roles=("staff", "support"))  # fmt: skip
    admin_token, _ = await store.create(kind=KeyKind.ADMIN, subject="root@acme.example", org="acme",
                                        roles=("approver", "registry"))  # fmt: skip
    service_token, _ = await store.create(kind=KeyKind.SERVICE, subject="expenses-svc", org="acme", roles=())
    wrong = f"{agent_token[:-4]}zzzz"
    booking = {"room_id": "room-eos", "date": "2026-12-28", "start": "09:00", "end": "10:00", "title": "Logged"}
    with recording():
        async with resolved(settings) as ready:
            await ensure_signing_key(SigningKeyStore(redis, secret=audit_secret(ready)))  # as `serve` does in a demo
            app = create_app(ready)
            with serve_app_in_thread(app, port=ready.port, lifespan=True) as base:
                await register_demo_manifest(base, service_token, ready.demo_services["expenses"])
                async with agent(f"{base}/mcp", agent_token) as client:
                    await client.call_tool("rooms_availability", {"room_id": "room-eos", "date": "2026-12-28"})
                    await client.call_tool("no_such_tool", {"token": agent_token})
                    card_id = payload(await client.call_tool("rooms_book", booking))["card_id"]
                card = await RedisLedger(redis).get(card_id)
                assert card is not None
                async with httpx.AsyncClient(base_url=base) as http:
                    admin = {"authorization": f"Bearer {admin_token}"}
                    body = {"version": card.version, "args_hash": card.args_hash, "comment": "ok"}
                    approved = await http.post(f"/admin/api/cards/{card_id}/approve", json=body, headers=admin)
                    assert approved.status_code == 200
                    with anyio.fail_after(15):
                        while (done := await RedisLedger(redis).get(card_id)) is None or done.state not in (
                            CardState.SUCCEEDED, CardState.FAILED,
                        ):  # fmt: skip
                            await anyio.sleep(0.05)
                    assert (
                        await http.get("/admin/api/cards", headers={"authorization": f"Bearer {wrong}"})
                    ).status_code == 401
                    assert (
                        await http.post("/mcp", json={}, headers={"authorization": f"Bearer {wrong}"})
                    ).status_code == 401
                    scrape = await http.get("/metrics", headers={"authorization": f"Bearer {metrics_token}"})
                    assert scrape.status_code == 200
                    await http.get("/readyz")
            minted = [agent_token, admin_token, service_token, wrong, metrics_token]
            for adapter in ready.adapters.values():
                minted += [str(value) for value in (adapter.token, adapter.signing_key) if value is not None]
            minted += [ready.secrets["EXPENSES_BACKEND_TOKEN"], ready.secrets["EXPENSES_SIGNING_KEY"]]
    minted.append((tmp_path / SECRET_FILE).read_text().strip())  # the audit secret the demo minted

    text = captured.getvalue()
    lines = [json.loads(line) for line in text.splitlines()]
    assert len(lines) >= 8, text
    for line in lines:
        assert {"timestamp", "level", "logger", "message"} <= set(line), line
        assert TIMESTAMP.match(line["timestamp"]), line
    access = [line for line in lines if line["logger"] == "countersign.access"]
    assert any(line.get("key_id") == agent_record.key_id and line["path"] == "/mcp" for line in access)
    assert any(re.fullmatch(r"[0-9a-f]{32}", line.get("trace_id", "")) for line in access)
    assert any(line["status"] == 401 for line in access)
    for secret in minted:
        assert len(secret) >= 16
        assert secret not in text, "a credential was logged"
        assert secret[-12:] not in text, "part of a credential was logged"


def test_plain_lines_have_a_timestamp_level_logger_and_the_ids(captured: io.StringIO) -> None:
    """The plain format keeps what an operator greps for: when, how bad, where, which key, which trace."""
    configure_logging("plain", stream=captured)
    with recording(), tracer.start_as_current_span("plain"):
        bind_key_id("key_0123abcd")
        logging.getLogger("gateway.test").warning("ledger is %s", "slow")
    [line] = captured.getvalue().splitlines()
    stamp, level, logger, *rest = line.split(" ")
    assert TIMESTAMP.match(stamp) and (level, logger) == ("WARNING", "gateway.test:")
    assert " ".join(rest).startswith("ledger is slow [key=key_0123abcd trace=")


@given(message=st.text(max_size=200))
def test_a_json_record_is_one_line_whatever_its_message(message: str) -> None:
    """Line breaks and control characters in a message cannot split a record or forge another."""
    buffer = io.StringIO()
    handler = configure_logging("json", stream=buffer)
    try:
        logging.getLogger("gateway.test").warning("%s", message)
    finally:
        logging.getLogger().removeHandler(handler)
    [line] = buffer.getvalue().splitlines()
    assert json.loads(line)["message"] == message


def test_an_unknown_log_format_is_refused() -> None:
    from gateway.errors import ConfigError

    with pytest.raises(ConfigError):
        replace(Settings(), log_format="xml")
    assert Settings.load({"COUNTERSIGN_LOG_FORMAT": "json", "COUNTERSIGN_ACCESS_LOG": "true"}).log_format == "json"
