"""`countersign serve` as a user runs it: a real process, its embedded Valkey, restarts and signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from redis.asyncio import Redis
from starlette.datastructures import Secret

from gateway.cards.card import CardState
from gateway.config.settings import Settings
from gateway.principal import Principal
from gateway.runtime.serve import resolved
from gateway.signing.identity import IDENTITY_HEADER, IdentityHeaders
from gateway.store.embedded import embedded_redis
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.agents import agent, payload
from tests.support.cards import approve
from tests.support.redis_server import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

READY = "Countersign is serving MCP at "
START_SECONDS = 30.0


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


@contextmanager
def _serving(cwd: Path, port: int, stop: signal.Signals) -> Iterator[tuple[str, str]]:
    """Run `countersign serve`; yield (mcp url, demo key); stop it with `stop` and check it exited cleanly."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    log = (cwd / f"serve-{port}.log").open("w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--port", str(port)], cwd=cwd, env=env, stdout=log, stderr=log
    )
    try:
        text = ""
        until = time.monotonic() + START_SECONDS
        while "Press Ctrl-C" not in text:  # bounded poll of the process's own output
            assert process.poll() is None, f"serve exited early:\n{text}"
            assert time.monotonic() < until, f"serve did not start:\n{text}"
            time.sleep(0.05)
            log.seek(0)
            text = log.read()
        url = text.split(READY, 1)[1].split()[0]
        key = text.split("demo agent key (demo@acme.example, org acme): ", 1)[1].split()[0]
        yield url, key
    finally:
        process.send_signal(stop)
        try:
            assert process.wait(timeout=20) == 0
        finally:
            if process.poll() is None:
                process.kill()
            log.seek(0)
            output = log.read()
            log.close()
        assert "Countersign stopped." in output, output
        assert not (cwd / ".countersign" / "embedded.json").exists(), "embedded server left running"


async def test_restart_keeps_keys_and_audit(tmp_path: Path) -> None:
    """Keys and audit survive a restart; the demo key is reused; CLI commands see the same data."""
    port = free_port()
    with _serving(tmp_path, port, signal.SIGTERM) as (url, demo_key):
        created = _cli(tmp_path, "keys", "create", "--kind", "agent", "--subject", "bob@acme.example",
                       "--org", "acme", "--roles", "staff")  # fmt: skip
        assert created.returncode == 0, created.stderr
        bob_key = created.stdout.strip()
        async with agent(url, bob_key) as client:
            result = await client.call_tool("rooms_list", {})
        assert not result.is_error and payload(result)["rooms"]

    listed = _cli(tmp_path, "keys", "list")  # serve is down: the CLI starts the embedded server itself
    assert listed.returncode == 0 and "bob@acme.example" in listed.stdout

    with _serving(tmp_path, port, signal.SIGINT) as (url, demo_key_again):
        assert demo_key_again == demo_key
        async with agent(url, bob_key) as client:
            assert not (await client.call_tool("rooms_list", {})).is_error
        tail = _cli(tmp_path, "audit", "tail", "-n", "50")
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.count("tool=rooms_list") == 2
    assert "key.create" in tail.stdout


async def test_card_approved_while_serve_is_down_runs_once_after_restart(tmp_path: Path) -> None:
    """Approval lands in the durable ledger while the gateway is stopped; the restarted worker runs it once."""
    port = free_port()
    booking = {"room_id": "room-delta", "date": "2026-12-20", "start": "11:00", "end": "12:00", "title": "Retro"}
    with _serving(tmp_path, port, signal.SIGTERM) as (url, demo_key):
        async with agent(url, demo_key) as client:
            card_id = payload(await client.call_tool("rooms_book", booking))["card_id"]

    async with embedded_redis(tmp_path / ".countersign", owner="cli") as handle:
        client = Redis.from_url(handle.url)
        try:
            ledger = RedisLedger(client)
            card = await ledger.get(card_id)
            assert card is not None and card.state is CardState.PENDING
            await approve(ledger, card_id, comment="while down")
        finally:
            await client.aclose()

    with _serving(tmp_path, port, signal.SIGINT) as (url, demo_key):
        async with agent(url, demo_key) as client:
            with anyio.fail_after(15):
                while (status := payload(await client.call_tool("approvals_status", {"card_id": card_id})))[
                    "outcome"
                ] in ("none", "in_progress"):
                    await anyio.sleep(0.1)
            mine = payload(await client.call_tool("rooms_my_bookings", {}))
    assert status["outcome"] == "succeeded"
    matching = [b for b in mine["bookings"] if (b["room_id"], b["date"]) == ("room-delta", "2026-12-20")]
    assert len(matching) == 1 and matching[0]["booking_id"] == status["reference"]


async def test_each_demo_backend_gets_a_fresh_signing_key_and_refuses_callers_not_signed_with_it(
    redis_url: str,
) -> None:
    """In demo mode the gateway makes up the key, and hands it to the backends it starts, which verify it."""
    settings = Settings(redis_url=redis_url, demo=True, port=free_port())
    async with resolved(settings) as ready:
        services = {name: (str(a.url), str(a.token), a.signing_key) for name, a in ready.adapters.items()}
        services["expenses"] = (ready.demo_services["expenses"], ready.secrets["EXPENSES_BACKEND_TOKEN"],
                                Secret(ready.secrets["EXPENSES_SIGNING_KEY"]))  # fmt: skip
        keys = {str(key) for _url, _token, key in services.values() if key is not None}
        assert len(keys) == len(services) == 3  # one key per backend, none shared
        for name, (url, token, key) in services.items():
            assert key is not None
            alice = Principal(subject="alice@acme.example", org="acme", roles=frozenset())
            signed = IdentityHeaders({name: str(key)})(alice, name)
            forged = IdentityHeaders({name: "a-key-the-backend-does-not-know-0123456789"})(alice, name)
            path = {"rooms": "/bookings/mine", "orders": "/orders/ord-1001", "expenses": "/reports"}[name]
            async with httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {token}"}) as client:
                admitted = await client.get(path, headers=signed)
                unsigned = await client.get(path, headers={k: v for k, v in signed.items() if k != IDENTITY_HEADER})
                refused = await client.get(path, headers=forged)
            assert admitted.status_code == 200, (name, admitted.text)
            assert (unsigned.status_code, unsigned.json()) == (400, {"error": "missing_identity"})
            assert (refused.status_code, refused.json()) == (401, {"error": "invalid_identity"})
