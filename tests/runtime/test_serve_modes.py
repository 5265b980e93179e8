"""Demo and production `countersign serve`, as real processes against a real Redis.

Production (a config file, ``COUNTERSIGN_REDIS_URL``, or ``COUNTERSIGN_MODE=production``) starts no
demo backend and makes no key; the operator's keys are the only ones, and a revoked one stays
revoked. The demo keeps its backends' data in the data directory, so a restart keeps a booking.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import pytest
from redis.asyncio import Redis
from starlette.datastructures import Secret

from gateway.config.settings import Settings
from gateway.errors import ConfigError
from gateway.runtime.serve import _without_credentials, preflight
from tests.support.agents import agent, payload
from tests.support.processes import READY, children_of, clean_environ, listening_ports, processes_using, serve
from tests.support.redis_server import free_port
from tests.support.services import TEST_AUDIT_SECRET, Backend

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@pytest.fixture
async def production_redis(redis_server_url: str) -> AsyncIterator[str]:
    """Database 6 of the session server, empty: no other gateway or worker uses it."""
    url = urlunsplit(urlsplit(redis_server_url)._replace(path="/6"))
    client = Redis.from_url(url)
    try:
        await client.flushdb()
        yield url
        await client.flushdb()
    finally:
        await client.aclose()


def _config(tmp_path: Path, backends: dict[str, Backend], port: int, *, extra: str = "") -> Path:
    config = tmp_path / "countersign.toml"
    config.write_text(
        f"""
[gateway]
port = {port}
data_dir = "{tmp_path / "data"}"
{extra}

[adapters.rooms]
url = "{backends["rooms"].url}"
token_env = "ROOMS_TOKEN"
signing_key_env = "ROOMS_SIGNING_KEY"

[orgs.acme]
adapters = ["rooms"]
roles = ["staff"]
"""
    )
    return config


def _environ(backends: dict[str, Backend], **extra: str) -> dict[str, str]:
    return clean_environ(
        ROOMS_TOKEN=backends["rooms"].token,
        ROOMS_SIGNING_KEY=backends["rooms"].signing_key,
        COUNTERSIGN_AUDIT_SECRET=TEST_AUDIT_SECRET,
        **extra,
    )


def _cli(cwd: Path, environ: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("asked_by", ["config after the command", "redis url only", "mode variable"])
async def test_production_prints_no_key_and_starts_no_demo_backend(
    tmp_path: Path, production_redis: str, backends: dict[str, Backend], asked_by: str
) -> None:
    """However production is asked for, serve listens on its own port only, prints no key or credential,
    runs no child but the embedded Valkey (when it uses one), and creates no key in Redis."""
    port = free_port()
    config = _config(tmp_path, backends, port)
    if asked_by == "config after the command":
        environ, args = _environ(backends, COUNTERSIGN_REDIS_URL=production_redis), ["serve", "--config", str(config)]
    elif asked_by == "redis url only":
        environ = _environ(backends, COUNTERSIGN_REDIS_URL=production_redis, COUNTERSIGN_PORT=str(port))
        args = ["serve"]
    else:  # as the Docker image does it: embedded Redis, but production
        environ, args = _environ(backends, COUNTERSIGN_MODE="production"), ["--config", str(config), "serve"]
    with serve(tmp_path, *args, environ=environ) as process:
        output = process.wait_for(READY)
        assert "production mode" in output
        assert listening_ports(process.pid) == {port}
        kids = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in children_of(process.pid)]
        assert all(b"valkey" in cmdline for cmdline in kids), kids
        assert (asked_by == "mode variable") == bool(kids)  # the embedded server, and only without a URL
        status, seconds = process.stop()
    output = process.output()
    assert status == 0 and seconds < 10 and "Countersign stopped." in output
    assert "csk_" not in output and "demo" not in output
    for secret in (backends["rooms"].token, backends["rooms"].signing_key, TEST_AUDIT_SECRET, production_redis):
        assert secret not in output
    if asked_by != "mode variable":
        client = Redis.from_url(production_redis)
        try:
            assert await client.keys("countersign:key*") == []
        finally:
            await client.aclose()


async def test_production_without_the_audit_secret_refuses_to_start(tmp_path: Path, production_redis: str) -> None:
    """A Redis URL makes it production, and production needs the audit secret: exit 1, naming it."""
    port = free_port()
    with serve(tmp_path, "serve", "--port", str(port),
               environ=clean_environ(COUNTERSIGN_REDIS_URL=production_redis)) as process:  # fmt: skip
        assert process.process.wait(timeout=10) == 1
    output = process.output()
    assert "COUNTERSIGN_AUDIT_SECRET" in output and "serving" not in output


async def test_production_adapter_without_url_is_refused_by_name(
    tmp_path: Path, production_redis: str, backends: dict[str, Backend]
) -> None:
    """No demo backend stands in: an adapter without a url stops serve before anything starts."""
    port = free_port()
    config = _config(tmp_path, backends, port).read_text() + "\n[adapters.orders]\n"
    (tmp_path / "countersign.toml").write_text(config)
    environ = _environ(backends, COUNTERSIGN_REDIS_URL=production_redis)
    with serve(tmp_path, "serve", "--config", str(tmp_path / "countersign.toml"), environ=environ) as process:
        assert process.process.wait(timeout=10) == 1
    output = process.output()
    assert "adapter orders has no url" in output and "serving" not in output


async def test_a_revoked_key_stays_revoked_across_restarts(
    tmp_path: Path, production_redis: str, backends: dict[str, Backend]
) -> None:
    """The operator's key works, is revoked while serve runs, and is still refused after a restart;
    no key is minted in its place."""
    port = free_port()
    config = str(_config(tmp_path, backends, port))
    environ = _environ(backends, COUNTERSIGN_REDIS_URL=production_redis)
    created = _cli(tmp_path, environ, "keys", "create", "--config", config, "--kind", "agent",
                   "--subject", "alice@acme.example", "--org", "acme", "--roles", "staff")  # fmt: skip
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    key_id = created.stderr.splitlines()[-1].split()[0]  # after the line naming the store
    url = f"http://127.0.0.1:{port}/mcp"
    with serve(tmp_path, "serve", "--config", config, environ=environ) as process:
        process.wait_for(READY)
        async with agent(url, token) as client:
            assert not (await client.call_tool("rooms_list", {})).is_error
        revoked = _cli(tmp_path, environ, "--config", config, "keys", "revoke", key_id)
        assert revoked.returncode == 0, revoked.stderr
        assert process.stop()[0] == 0
    with serve(tmp_path, "serve", "--config", config, environ=environ) as process:
        process.wait_for(READY)
        async with httpx.AsyncClient(timeout=10) as http:
            refused = await http.post(url, json=INITIALIZE, headers={**MCP_HEADERS, "authorization": f"Bearer {token}"})
        assert process.stop()[0] == 0
    assert refused.status_code == 401
    listed = _cli(tmp_path, environ, "keys", "list", "--config", config)
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == 1 and "revoked" in listed.stdout


async def test_the_demo_backends_keep_their_data_across_a_restart(tmp_path: Path) -> None:
    """A booking approved and run in one demo run is still there, under the card's reference, in the next
    (asked for with ``serve --demo`` despite a config file)."""
    port = free_port()
    booking = {"room_id": "room-eos", "date": "2026-12-22", "start": "09:00", "end": "10:00", "title": "Kickoff"}
    with serve(tmp_path, "serve", "--port", str(port)) as process:
        output = process.wait_for(READY)
        url = f"http://127.0.0.1:{port}"
        key = output.split("demo agent key (demo@acme.example, org acme): ", 1)[1].split()[0]
        admin = output.split("demo admin key (root@acme.example; approver, registry): ", 1)[1].split()[0]
        async with agent(f"{url}/mcp", key) as client:
            card_id = payload(await client.call_tool("rooms_book", booking))["card_id"]
            async with httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {admin}"}) as http:
                shown = (await http.get(f"/admin/api/cards/{card_id}")).json()
                card = shown.get("card", shown)
                decision = {"version": card["version"], "args_hash": card["args_hash"]}
                approved = await http.post(f"/admin/api/cards/{card_id}/approve", json=decision)
                assert approved.status_code == 200, approved.text
            with anyio.fail_after(15):
                while (status := payload(await client.call_tool("approvals_status", {"card_id": card_id})))[
                    "outcome"
                ] in ("none", "in_progress"):
                    await anyio.sleep(0.1)
        assert status["outcome"] == "succeeded"
        assert process.stop()[0] == 0
    assert (tmp_path / ".countersign" / "backends" / "rooms.json").exists()

    # The second run has a config file, which alone would mean production: --demo asks for the demo.
    config = tmp_path / "countersign.toml"
    config.write_text(f'[gateway]\nport = {port}\ndata_dir = "{tmp_path / ".countersign"}"\n')
    with serve(tmp_path, "serve", "--demo", "--config", str(config)) as process:
        assert "demo mode" in process.wait_for(READY)
        async with agent(f"{url}/mcp", key) as client:
            mine = payload(await client.call_tool("rooms_my_bookings", {}))
            again = payload(await client.call_tool("approvals_status", {"card_id": card_id}))
        assert process.stop()[0] == 0
    assert again["outcome"] == "succeeded" and again["reference"] == status["reference"]
    assert [b["booking_id"] for b in mine["bookings"] if b["room_id"] == "room-eos"] == [status["reference"]]
    assert processes_using(tmp_path) == []


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://svc:pa55@rooms.example:8443/base", "https://rooms.example:8443/base"),
        ("https://token@rooms.example", "https://rooms.example"),
        ("http://u:p@[::1]:9000", "http://[::1]:9000"),
        ("https://rooms.example/x", "https://rooms.example/x"),
    ],
)
def test_a_backend_url_is_printed_without_its_credentials(url: str, shown: str) -> None:
    """serve prints where each adapter's backend is, never the user and password a URL may carry."""
    assert _without_credentials(url) == shown


def test_preflight_names_every_adapter_production_cannot_serve() -> None:
    """Checked before anything starts; the demo would start backends for the same settings."""
    production = Settings(demo=False, audit_secret=Secret("a-test-audit-secret"))
    with pytest.raises(ConfigError) as refused:
        preflight(production)
    assert "adapters orders, rooms have no url" in str(refused.value)
    preflight(replace(production, demo=True))
