"""The composition root's refusals and wiring: what a gateway will not start without."""

from __future__ import annotations

import contextlib
import io
from dataclasses import replace
from pathlib import Path

import pytest
from redis.asyncio import Redis
from starlette.datastructures import Secret

from backends.serve import serve_app_in_thread
from gateway.app import build_gateway, create_app, tools_for
from gateway.cli import main
from gateway.errors import ConfigError
from tests.support.agents import agent, error_code, make_key
from tests.support.services import Backend, gateway_settings

pytestmark = pytest.mark.anyio


def test_a_configured_backend_without_a_signing_key_keeps_the_gateway_from_starting(
    redis_url: str, backends: dict[str, Backend]
) -> None:
    """No key is made up: building the gateway fails, naming the adapter and the setting to add."""
    settings = gateway_settings(redis_url, backends)
    unkeyed = replace(settings.adapters["rooms"], signing_key=None)
    settings = replace(settings, adapters={**settings.adapters, "rooms": unkeyed})
    with pytest.raises(ConfigError) as refused:
        build_gateway(settings, tools_for(settings))
    assert "adapter rooms has no signing key" in str(refused.value) and "signing_key_env" in str(refused.value)


def test_a_worker_configured_without_signing_keys_exits_with_the_reason(
    tmp_path: Path, redis_url: str, backends: dict[str, Backend]
) -> None:
    """`countersign worker` with a backend URL but no signing_key_env says why and exits 1, having sent nothing."""
    config = tmp_path / "countersign.toml"
    config.write_text(f'[adapters.rooms]\nurl = "{backends["rooms"].url}"\ntoken_env = "ROOMS_TOKEN"\n')
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(["--config", str(config), "worker"],
                      {"COUNTERSIGN_REDIS_URL": redis_url, "ROOMS_TOKEN": backends["rooms"].token})  # fmt: skip
    assert status == 1
    assert "adapter rooms has no signing key" in err.getvalue()


async def test_a_backend_refuses_a_gateway_that_signs_with_another_key(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """The identity is checked by the backend itself: signed with the wrong key, the call gets nothing."""
    settings = gateway_settings(redis_url, backends)
    wrong = replace(settings.adapters["rooms"], signing_key=Secret("not-the-key-rooms-verifies-with-0123456789"))
    settings = replace(settings, adapters={**settings.adapters, "rooms": wrong}, run_worker=False)
    token = await make_key(redis, roles=("staff",))
    before = len(backends["rooms"].app.state.service.requests)
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        async with agent(f"{base}/mcp", token) as client:
            mine = await client.call_tool("rooms_my_bookings", {})
            orders = await client.call_tool("orders_get", {"order_id": "ord-1001"})
    assert error_code(mine) == "UPSTREAM_ERROR"
    assert not orders.is_error  # orders is keyed correctly and answers
    seen = list(backends["rooms"].app.state.service.requests)[before:]
    assert [r.path for r in seen if r.path == "/bookings/mine"] == ["/bookings/mine"]
