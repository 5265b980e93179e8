"""Chaos: a worker process killed with SIGKILL after DISPATCHED, before it could record the outcome."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import pytest
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.cards.card import Card, CardState, verify_chain
from gateway.runtime.app import create_app
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.agents import agent, make_key, payload
from tests.support.services import TEST_AUDIT_SECRET, Backend, gateway_settings

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LEASE_SECONDS = 15.5
"""The shortest lease the worker accepts with the rooms tools: it must outlast their 10 s timeout by
more than the 5 s margin (`gateway.tools.toolbox.LEASE_MARGIN_SECONDS`)."""


@pytest.fixture(scope="module", name="redis_url")
def chaos_database(redis_server_url: str) -> str:
    """A database of its own: only the workers this test starts may run its cards."""
    return urlunsplit(urlsplit(redis_server_url)._replace(path="/5"))


@contextmanager
def _worker(
    tmp_path: Path, redis_url: str, backends: dict[str, Backend], name: str
) -> Iterator[subprocess.Popen[bytes]]:
    """`countersign worker` as its own process, configured for the test backends."""
    config = tmp_path / "countersign.toml"
    config.write_text(
        f"""
[gateway]
lease_seconds = {LEASE_SECONDS}

[adapters.rooms]
url = "{backends["rooms"].url}"
token_env = "TEST_ROOMS_TOKEN"
signing_key_env = "TEST_ROOMS_SIGNING_KEY"

[adapters.orders]
url = "{backends["orders"].url}"
token_env = "TEST_ORDERS_TOKEN"
signing_key_env = "TEST_ORDERS_SIGNING_KEY"

[orgs.acme]
adapters = ["rooms", "orders"]
roles = ["staff", "support", "approver"]
"""
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    env |= {"COUNTERSIGN_REDIS_URL": redis_url, "COUNTERSIGN_CONFIG": str(config),
            "COUNTERSIGN_AUDIT_SECRET": TEST_AUDIT_SECRET, "COUNTERSIGN_DATA_DIR": str(tmp_path),
            "TEST_ROOMS_TOKEN": backends["rooms"].token, "TEST_ORDERS_TOKEN": backends["orders"].token,
            "TEST_ROOMS_SIGNING_KEY": backends["rooms"].signing_key,
            "TEST_ORDERS_SIGNING_KEY": backends["orders"].signing_key}  # fmt: skip
    log = (tmp_path / f"{name}.log").open("w")
    process = subprocess.Popen([sys.executable, "-m", "gateway", "worker"], env=env, stdout=log, stderr=log)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        log.close()


async def _until(ledger: RedisLedger, card_id: str, done: object, timeout: float) -> Card:
    with anyio.fail_after(timeout):
        while True:
            card = await ledger.get(card_id)
            if card is not None and done(card):  # type: ignore[operator]
                return card
            await anyio.sleep(0.02)


@pytest.mark.parametrize(
    ("fault", "day", "settled_by"),
    [
        # The backend applies the booking at once and answers late: the status query finds it.
        ({"reply_after_commit_ms": 5000}, "2026-12-21", "reconciled"),
        # The request dies with the worker before the backend read it: nothing applied, so after the
        # settle period it is sent again with the same key.
        ({"latency_ms": 2500}, "2026-12-22", "claimed_for_resend"),
    ],
)
async def test_worker_killed_after_dispatch_ends_with_exactly_one_effect(
    redis: Redis,
    redis_url: str,
    clean_backends: dict[str, Backend],
    tmp_path: Path,
    fault: dict[str, int],
    day: str,
    settled_by: str,
) -> None:
    """SIGKILL mid-send: the lease runs out, the card becomes UNKNOWN, a status query settles it; one booking."""
    app = create_app(replace(gateway_settings(redis_url, clean_backends), run_worker=False))
    token = await make_key(redis, roles=("staff",))
    booking = {"room_id": "room-borealis", "date": day, "start": "13:00", "end": "14:00", "title": "Chaos"}
    with serve_app_in_thread(app, lifespan=True) as base:
        async with agent(f"{base}/mcp", token) as client:
            card_id = payload(await client.call_tool("rooms_book", booking))["card_id"]
    ledger = RedisLedger(redis)
    # The backend takes its time with the booking, so the worker is certainly mid-send when killed.
    clean_backends["rooms"].set_faults(**fault, paths=["/bookings"], times=1)
    card = await ledger.get(card_id)
    assert card is not None
    approved = await ledger.approve(card_id, approver="root@acme.example", version=card.version,
                                    args_hash=card.args_hash, comment="")  # fmt: skip
    assert approved.ok

    with _worker(tmp_path, redis_url, clean_backends, "first") as first:
        sent = await _until(ledger, card_id, lambda c: c.state is CardState.EXECUTING and c.dispatched, timeout=20)
        # Kill only once the backend has the request: DISPATCHED is recorded just before sending.
        requests = clean_backends["rooms"].app.state.service.requests
        with anyio.fail_after(10):
            while not any(r.headers.get("idempotency-key") == sent.idempotency_key for r in list(requests)):
                await anyio.sleep(0.01)
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=10) == -signal.SIGKILL

    with _worker(tmp_path, redis_url, clean_backends, "second"):
        final = await _until(ledger, card_id, lambda c: c.state in (CardState.SUCCEEDED, CardState.FAILED), 60)

    assert final.state is CardState.SUCCEEDED
    bookings = [b for b in clean_backends["rooms"].app.state.service.bookings.values()
                if (b.room_id, b.date, b.status) == ("room-borealis", day, "active")]  # fmt: skip
    assert [b.booking_id for b in bookings] == [final.reference]
    events = await ledger.events(card_id)
    types = [e.type for e in events]
    assert "lease_lost_after_dispatch" in types and "completed" not in types[: types.index("lease_lost_after_dispatch")]
    assert settled_by in types
    assert verify_chain(events)
