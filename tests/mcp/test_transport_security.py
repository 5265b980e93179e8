"""Host and Origin checks on /mcp are always on: a foreign Host is 421, a foreign Origin 403.

On loopback the gateway accepts the loopback names and their origins; bound beyond loopback it
accepts exactly the configured `allowed_hosts` and `allowed_origins` (it refuses to start without
them, see `tests/runtime/test_serve_process.py`).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from redis.asyncio import Redis

from tests.support.agents import make_key
from tests.support.processes import READY, clean_environ, serve
from tests.support.redis_server import free_port
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


async def _initialize(url: str, key: str, **headers: str) -> int:
    base = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.post(url, json=INITIALIZE, headers={**base, "authorization": f"Bearer {key}", **headers})
    return answer.status_code


async def test_on_loopback_a_foreign_host_is_421_and_a_foreign_origin_403(redis: Redis, mcp_url: str) -> None:
    """The default gateway (127.0.0.1) answers its loopback names and origins, and nothing else."""
    key = await make_key(redis)
    port = urlsplit(mcp_url).port
    assert await _initialize(mcp_url, key) == 200
    assert await _initialize(mcp_url, key, origin=f"http://localhost:{port}") == 200
    assert await _initialize(mcp_url, key, host="rebound.example") == 421
    assert await _initialize(mcp_url, key, host=f"rebound.example:{port}") == 421
    assert await _initialize(mcp_url, key, origin="http://rebound.example") == 403
    assert await _initialize(mcp_url, key, origin=f"https://rebound.example:{port}") == 403


@pytest.fixture
async def wildcard_redis(redis_server_url: str) -> AsyncIterator[str]:
    """Database 7 of the session server, empty."""
    url = urlunsplit(urlsplit(redis_server_url)._replace(path="/7"))
    client = Redis.from_url(url)
    try:
        await client.flushdb()
        yield url
        await client.flushdb()
    finally:
        await client.aclose()


@pytest.mark.slow
async def test_bound_to_all_addresses_it_accepts_only_the_configured_hosts_and_origins(
    tmp_path: Path, wildcard_redis: str
) -> None:
    """`0.0.0.0` with both allow-lists: the configured name and origin are served, others are not."""
    port = free_port()
    config = tmp_path / "countersign.toml"
    config.write_text(
        f'[gateway]\nhost = "0.0.0.0"\nport = {port}\nallowed_hosts = ["gateway.example:{port}"]\n'
        f'allowed_origins = ["https://console.example"]\n\n[orgs.acme]\nroles = ["staff"]\n'
    )
    environ = clean_environ(COUNTERSIGN_REDIS_URL=wildcard_redis, COUNTERSIGN_AUDIT_SECRET=TEST_AUDIT_SECRET)
    created = subprocess.run(
        [sys.executable, "-m", "gateway", "keys", "create", "--kind", "agent", "--subject", "a@acme.example",
         "--org", "acme", "--config", str(config)],
        env=environ, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    url = f"http://127.0.0.1:{port}/mcp"
    with serve(tmp_path, "serve", "--config", str(config), environ=environ) as process:
        process.wait_for(READY)
        served = await _initialize(url, key, host=f"gateway.example:{port}")
        from_console = await _initialize(url, key, host=f"gateway.example:{port}", origin="https://console.example")
        by_address = await _initialize(url, key)  # Host 127.0.0.1:<port>, not a configured name
        foreign_origin = await _initialize(url, key, host=f"gateway.example:{port}", origin="https://evil.example")
        assert process.stop()[0] == 0
    assert (served, from_console) == (200, 200)
    assert by_address == 421 and foreign_origin == 403
