"""The composition root's refusals and wiring: what a gateway will not start without."""

from __future__ import annotations

from dataclasses import replace

import httpx
import jwt
import pytest
from redis.asyncio import Redis
from starlette.datastructures import Secret

from backends.serve import serve_app_in_thread
from gateway.runtime.app import create_app
from gateway.signing.identity import verify_identity
from tests.support.agents import agent, error_code, make_key
from tests.support.services import Backend, gateway_settings

pytestmark = pytest.mark.anyio


async def test_a_configured_backend_without_a_shared_key_gets_identities_signed_with_the_gateways_keys(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """No key is made up for it: without `signing_key_env` the identity is EdDSA, verifiable with the gateway's
    JWKS alone. This rooms backend still knows only its shared HS256 key, so it refuses the call (401); what
    it received verifies with the JWKS."""
    settings = gateway_settings(redis_url, backends)
    unkeyed = replace(settings.adapters["rooms"], signing_key=None)
    settings = replace(settings, adapters={**settings.adapters, "rooms": unkeyed}, run_worker=False)
    token = await make_key(redis, roles=("staff",))
    before = backends["rooms"].app.state.service.received
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        async with agent(f"{base}/mcp", token) as client:
            mine = await client.call_tool("rooms_my_bookings", {})
        with httpx.Client(base_url=base) as http:
            jwks = http.get("/.well-known/jwks.json").json()
    assert error_code(mine) == "UPSTREAM_ERROR"
    [seen] = [r for r in backends["rooms"].app.state.service.since(before) if r.path == "/bookings/mine"]
    claims = verify_identity(seen.headers["x-countersign-identity"], adapter="rooms", jwks=jwks)
    assert claims == {"sub": "alice@acme.example", "org": "acme"}
    with pytest.raises(jwt.InvalidTokenError):
        verify_identity(seen.headers["x-countersign-identity"], adapter="rooms", key=backends["rooms"].signing_key)


async def test_a_backend_refuses_a_gateway_that_signs_with_another_key(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """The identity is checked by the backend itself: signed with the wrong key, the call gets nothing."""
    settings = gateway_settings(redis_url, backends)
    wrong = replace(settings.adapters["rooms"], signing_key=Secret("not-the-key-rooms-verifies-with-0123456789"))
    settings = replace(settings, adapters={**settings.adapters, "rooms": wrong}, run_worker=False)
    token = await make_key(redis, roles=("staff",))
    before = backends["rooms"].app.state.service.received
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        async with agent(f"{base}/mcp", token) as client:
            mine = await client.call_tool("rooms_my_bookings", {})
            orders = await client.call_tool("orders_get", {"order_id": "ord-1001"})
    assert error_code(mine) == "UPSTREAM_ERROR"
    assert not orders.is_error  # orders is keyed correctly and answers
    seen = backends["rooms"].app.state.service.since(before)
    assert [r.path for r in seen if r.path == "/bookings/mine"] == ["/bookings/mine"]
