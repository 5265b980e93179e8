"""The loopback serve helpers: real uvicorn, a free port, a clean stop."""

from __future__ import annotations

import re

import anyio
import anyio.lowlevel
import httpx
import pytest

from backends import create_orders_app, create_rooms_app, serve_app, serve_app_in_thread
from tests.support.services import TEST_SIGNING_KEY, signed_identity

LOOPBACK_URL = re.compile(r"http://127\.0\.0\.1:(\d+)")


@pytest.mark.anyio
async def test_serve_app_serves_on_a_free_loopback_port_until_the_block_ends() -> None:
    """The URL names the real port, the app answers there, and nothing listens after the block."""
    with anyio.fail_after(5):
        async with serve_app(create_rooms_app(service_token="t", signing_key=TEST_SIGNING_KEY)) as url:
            async with httpx.AsyncClient(base_url=url) as client:
                health = await client.get("/_health")
        match = LOOPBACK_URL.fullmatch(url)
        assert match is not None and int(match.group(1)) > 0
        assert health.json() == {"ok": True}
        async with httpx.AsyncClient(base_url=url) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get("/_health")


@pytest.mark.anyio
async def test_two_servers_get_different_ports_and_separate_state() -> None:
    """Each app has its own server and its own copy of the demo data."""
    with anyio.fail_after(5):
        first_app, second_app = (
            create_orders_app(service_token="t", signing_key=TEST_SIGNING_KEY),
            create_orders_app(service_token="t", signing_key=TEST_SIGNING_KEY),
        )
        async with serve_app(first_app) as first, serve_app(second_app) as second:
            assert first != second
            alice = signed_identity("alice@acme.example", "acme", audience="orders", key=TEST_SIGNING_KEY)
            headers = {"Authorization": "Bearer t", "Idempotency-Key": "k1", **alice}
            async with httpx.AsyncClient(base_url=first, headers=headers) as client:
                response = await client.post("/orders/ord-1001/refunds", json={"amount_cents": 100, "reason": "x"})
        assert response.status_code == 201
        assert len(first_app.state.service.refunds) == 3
        assert len(second_app.state.service.refunds) == 2


@pytest.mark.anyio
async def test_serve_app_still_stops_the_server_when_its_block_is_cancelled() -> None:
    """Cancelling the block (a test timing out, say) still shuts the server down and frees the port."""
    with anyio.fail_after(5):
        with anyio.CancelScope() as scope:
            async with serve_app(create_rooms_app(service_token="t", signing_key=TEST_SIGNING_KEY)) as url:
                scope.cancel()
                await anyio.lowlevel.checkpoint()
        assert scope.cancelled_caught
        async with httpx.AsyncClient(base_url=url) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get("/_health")


@pytest.mark.anyio
async def test_serve_app_on_a_port_in_use_fails_before_serving() -> None:
    """Binding is done up front, so a taken port is an immediate ``OSError``."""
    with anyio.fail_after(5):
        async with serve_app(create_rooms_app(service_token="t", signing_key=TEST_SIGNING_KEY)) as url:
            port = int(url.rsplit(":", 1)[1])
            with pytest.raises(OSError):
                async with serve_app(create_rooms_app(service_token="t", signing_key=TEST_SIGNING_KEY), port=port):
                    pass


def test_serve_app_in_thread_serves_sync_clients_until_the_block_ends() -> None:
    """The thread variant works from plain sync code and stops when the block ends."""
    with serve_app_in_thread(create_rooms_app(service_token="t", signing_key=TEST_SIGNING_KEY)) as url:
        health = httpx.get(f"{url}/_health", timeout=5)
    assert LOOPBACK_URL.fullmatch(url)
    assert health.json() == {"ok": True}
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/_health", timeout=5)
