"""The read path end to end: real uvicorn, real Redis, real backends, the official MCP client."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from redis.asyncio import Redis

from backends.demo_data import HIDDEN_TITLE, HOSTILE_NOTE, HOSTILE_TITLE
from gateway.signing.identity import IDENTITY_HEADER, verify_identity
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.keys import KeyStore
from tests.support.agents import LEGACY, MODERN, agent, error_code, everything_the_model_sees, make_key, payload
from tests.support.services import Backend

pytestmark = pytest.mark.anyio

ALL_TOOLS = ["rooms_list", "rooms_availability", "rooms_my_bookings", "orders_get", "orders_refund_eligibility"]
VALID_ARGUMENTS: dict[str, dict[str, Any]] = {
    "rooms_list": {},
    "rooms_availability": {"room_id": "room-atlas", "date": "2026-12-01"},
    "rooms_my_bookings": {},
    "orders_get": {"order_id": "ord-1001"},
    "orders_refund_eligibility": {"order_id": "ord-1001"},
}


async def _listed(mcp_url: str, token: str, mode: str = "auto") -> list[str]:
    async with agent(mcp_url, token, mode) as client:
        return [tool.name for tool in (await client.list_tools()).tools]


async def _audit(redis: Redis) -> list[Any]:
    return list(await RedisStreamAuditSink(redis).recent(100))


@pytest.mark.parametrize(
    ("org", "roles", "expected"),
    [
        ("acme", ("staff",), ["rooms_list", "rooms_availability", "rooms_my_bookings", "orders_get"]),
        ("acme", ("support",), ["rooms_list", "rooms_availability", "orders_get", "orders_refund_eligibility"]),
        ("acme", (), ["rooms_list", "rooms_availability"]),
        ("globex", ("staff",), ["rooms_list", "rooms_availability", "rooms_my_bookings", "orders_get"]),
        ("initech", ("staff", "support"), []),
    ],
)
async def test_each_principal_sees_exactly_the_tools_its_access_allows(
    redis: Redis, mcp_url: str, org: str, roles: tuple[str, ...], expected: list[str]
) -> None:
    """tools/list is per caller: org org_adapters and roles decide, in declaration order."""
    token = await make_key(redis, org=org, roles=roles)
    listed = await _listed(mcp_url, token)
    assert [name for name in listed if name in ALL_TOOLS] == expected
    # Every configured org gets the built-in tools to follow its own cards; others get nothing.
    assert {"approvals_status", "approvals_mine", "approvals_cancel"} <= set(listed) or org == "initech"
    assert listed == [] or org != "initech"


@pytest.mark.parametrize(
    ("org", "roles"), [("acme", ("staff",)), ("acme", ("support",)), ("acme", ()), ("initech", ("staff",))]
)
async def test_a_tool_is_listed_exactly_when_calling_it_is_allowed(
    redis: Redis, mcp_url: str, org: str, roles: tuple[str, ...]
) -> None:
    """The catalog and the executor agree for every tool: listed <=> not PERMISSION_DENIED."""
    token = await make_key(redis, org=org, roles=roles)
    async with agent(mcp_url, token) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        for name in ALL_TOOLS:
            result = await client.call_tool(name, VALID_ARGUMENTS[name])
            denied = result.is_error and error_code(result) == "PERMISSION_DENIED"
            assert (name in listed) is (not denied), name


@pytest.mark.parametrize("mode", [LEGACY, MODERN])
async def test_both_protocol_eras_list_and_call(redis: Redis, mcp_url: str, mode: str) -> None:
    """The 2025-11-25 handshake and the stateless 2026-07-28 envelope both serve the read path."""
    token = await make_key(redis, roles=("staff",))
    async with agent(mcp_url, token, mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert tools["rooms_list"].annotations is not None and tools["rooms_list"].annotations.read_only_hint
        assert tools["orders_get"].input_schema["additionalProperties"] is False
        result = await client.call_tool("rooms_list", {})
    assert not result.is_error
    assert {room["id"] for room in payload(result)["rooms"]} >= {"room-atlas", "room-eos"}


async def test_missing_bad_and_revoked_keys_get_401_with_bearer_challenge(redis: Redis, mcp_url: str) -> None:
    """No key, a made-up key and a revoked key are all refused before MCP sees the request."""
    token = await make_key(redis)
    [record] = await KeyStore(redis).list()
    assert await _listed(mcp_url, token) != []
    await KeyStore(redis).revoke(record.key_id)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with httpx.AsyncClient() as http:
        revoked = {"authorization": f"Bearer {token}"}
        with anyio.fail_after(3):  # the gateway caches a resolved key for at most a second
            while (
                await http.post(mcp_url, json=body, headers={"accept": "application/json", **revoked})
            ).status_code != 401:
                await anyio.sleep(0.1)
        for headers in ({}, {"authorization": "Bearer csk_agent_made-up"}, revoked):
            response = await http.post(mcp_url, json=body, headers={"accept": "application/json", **headers})
            assert response.status_code == 401
            assert response.headers["www-authenticate"].startswith("Bearer ")
    rejects = [e for e in await _audit(redis) if e.action == "auth.reject"]
    assert len(rejects) >= 2  # the made-up and the revoked key (each time); a missing header is not an attempt
    assert {e.reason for e in rejects} == {"unknown, revoked or wrong-kind key"}


async def test_an_admin_key_cannot_open_the_agent_surface(redis: Redis, mcp_url: str) -> None:
    """Keys open one surface each: an admin key is not an agent key."""
    from gateway.principal import KeyKind

    token = await make_key(redis, kind=KeyKind.ADMIN, roles=("approver",))
    async with httpx.AsyncClient() as http:
        response = await http.post(mcp_url, json={}, headers={"authorization": f"Bearer {token}"})
    assert response.status_code == 401


@pytest.mark.parametrize(
    ("name", "arguments", "code"),
    [
        ("rooms_delete_everything", {}, "PERMISSION_DENIED"),
        ("orders_refund_eligibility", {"order_id": "ord-1001"}, "PERMISSION_DENIED"),
        ("rooms_availability", {"room_id": 7, "date": "2026-12-01"}, "VALIDATION_ERROR"),
        ("rooms_availability", {"room_id": "room-atlas", "date": "2026-12-01", "x": 1}, "VALIDATION_ERROR"),
        ("rooms_availability", {"room_id": "room-atlas"}, "VALIDATION_ERROR"),
        ("rooms_availability", {"room_id": "../../_faults", "date": "2026-12-01"}, "VALIDATION_ERROR"),
        ("rooms_availability", {"room_id": "room-nowhere", "date": "2026-12-01"}, "NOT_FOUND"),
    ],
)
async def test_refusals_give_their_code_an_audit_entry_and_no_crash(
    redis: Redis, mcp_url: str, name: str, arguments: dict[str, Any], code: str
) -> None:
    """Each refusal is data with a stable code, audited, and the session keeps working."""
    token = await make_key(redis, roles=("staff",))
    async with agent(mcp_url, token) as client:
        result = await client.call_tool(name, arguments)
        assert error_code(result) == code
        assert not (await client.call_tool("rooms_list", {})).is_error
    [refusal, _ok] = [e for e in await _audit(redis) if e.action == "tool.call"]
    assert (refusal.tool, refusal.code) == (name, code)


async def test_unknown_and_forbidden_tools_answer_identically(redis: Redis, mcp_url: str) -> None:
    """A caller cannot tell a hidden tool from one that does not exist."""
    token = await make_key(redis, roles=("staff",))
    async with agent(mcp_url, token) as client:
        hidden = await client.call_tool("orders_refund_eligibility", {"order_id": "ord-1001"})
        missing = await client.call_tool("orders_refund_everything", {"order_id": "ord-1001"})
    assert everything_the_model_sees(hidden) == everything_the_model_sees(missing)


async def test_backend_answering_503_gives_upstream_unavailable(
    redis: Redis, mcp_url: str, clean_backends: dict[str, Backend]
) -> None:
    """A backend that is down answers UPSTREAM_UNAVAILABLE (retryable), audited as an error."""
    clean_backends["rooms"].set_faults(status=503)
    token = await make_key(redis)
    async with agent(mcp_url, token) as client:
        result = await client.call_tool("rooms_list", {})
    assert error_code(result) == "UPSTREAM_UNAVAILABLE"
    assert payload(result)["error"]["retryable"] is True
    [event] = [e for e in await _audit(redis) if e.action == "tool.call"]
    assert (event.outcome, event.code) == ("error", "UPSTREAM_UNAVAILABLE")


async def test_backend_slow_past_the_deadline_gives_upstream_timeout(
    redis: Redis, mcp_url: str, clean_backends: dict[str, Backend]
) -> None:
    """A backend slower than the adapter's deadline answers UPSTREAM_TIMEOUT, then recovers."""
    clean_backends["orders"].set_faults(latency_ms=3000, times=1)
    token = await make_key(redis, roles=("staff",))
    async with agent(mcp_url, token) as client:
        with anyio.fail_after(5):
            result = await client.call_tool("orders_get", {"order_id": "ord-1001"})
        assert error_code(result) == "UPSTREAM_TIMEOUT"
        assert not (await client.call_tool("orders_get", {"order_id": "ord-1001"})).is_error
    codes = [e.code for e in await _audit(redis) if e.action == "tool.call"]
    assert codes == ["UPSTREAM_TIMEOUT", ""]


@pytest.mark.parametrize("mode", [LEGACY, MODERN])
async def test_third_party_text_never_reaches_the_model(redis: Redis, mcp_url: str, mode: str) -> None:
    """Hostile booking titles and customer notes are withheld from everything the model receives."""
    token = await make_key(redis, roles=("staff",))
    async with agent(mcp_url, token, mode) as client:
        atlas = await client.call_tool("rooms_availability", {"room_id": "room-atlas", "date": "2026-12-01"})
        cirrus = await client.call_tool("rooms_availability", {"room_id": "room-cirrus", "date": "2026-12-02"})
        order = await client.call_tool("orders_get", {"order_id": "ord-1002"})
    seen = "".join(everything_the_model_sees(r) for r in (atlas, cirrus, order))
    for hostile in (HOSTILE_TITLE, HIDDEN_TITLE, "Budget sync", HOSTILE_NOTE, "hank@globex.example"):
        assert hostile not in seen
        assert json.dumps(hostile)[1:-1] not in seen  # nor escaped
    assert not any(0xE0000 <= ord(char) <= 0xE007F for char in seen)
    # The model still learns what it needs: when the room is taken and free.
    taken = payload(atlas)["taken"]
    assert {"start": "10:30", "end": "11:30"} in taken
    assert payload(order)["has_customer_note"] is True
    events = json.dumps([e.to_fields() for e in await _audit(redis)])
    assert HOSTILE_TITLE not in events and HOSTILE_NOTE not in events


async def test_another_orgs_order_and_a_missing_order_answer_identically(redis: Redis, mcp_url: str) -> None:
    """An object of another org cannot be told apart from one that does not exist."""
    token = await make_key(redis, roles=("staff", "support"))
    async with agent(mcp_url, token) as client:
        for tool in ("orders_get", "orders_refund_eligibility"):
            other_org = await client.call_tool(tool, {"order_id": "ord-1005"})
            missing = await client.call_tool(tool, {"order_id": "ord-9999"})
            assert error_code(other_org) == "NOT_FOUND"
            assert everything_the_model_sees(other_org) == everything_the_model_sees(missing)


async def test_every_configured_backend_gets_the_callers_identity_signed_with_its_own_key(
    redis: Redis, mcp_url: str, backends: dict[str, Backend]
) -> None:
    """Each call carries an identity the backend verifies with its key, for its own name and this caller."""
    token = await make_key(redis, roles=("staff", "support"), subject="carol@acme.example")
    async with agent(mcp_url, token) as client:
        for name in ALL_TOOLS:
            assert not (await client.call_tool(name, VALID_ARGUMENTS[name])).is_error, name
    for adapter, backend in backends.items():
        signed = [r.headers[IDENTITY_HEADER] for r in backend.app.state.service.requests
                  if r.headers.get("x-countersign-subject") == "carol@acme.example"]  # fmt: skip
        assert signed, adapter
        for identity in signed:
            claims = verify_identity(identity, key=backend.signing_key, adapter=adapter)
            assert claims == {"sub": "carol@acme.example", "org": "acme"}


async def test_the_agents_token_never_reaches_a_backend(
    redis: Redis, mcp_url: str, backends: dict[str, Backend]
) -> None:
    """Backends see the gateway's own credential and the caller's identity, never the bearer key."""
    token = await make_key(redis, roles=("staff", "support"), subject="carol@acme.example")
    async with agent(mcp_url, token) as client:
        for name in ALL_TOOLS:
            assert not (await client.call_tool(name, VALID_ARGUMENTS[name])).is_error, name
    for backend in backends.values():
        requests = [r for r in backend.app.state.service.requests if r.headers.get("x-countersign-subject")]
        mine = [r for r in requests if r.headers["x-countersign-subject"] == "carol@acme.example"]
        assert mine, "the backend saw the caller's identity"
        for request in requests:
            assert all(token not in value for value in request.headers.values())
            assert request.headers["authorization"] == f"Bearer {backend.token}"
            assert request.headers["x-countersign-org"] in {"acme", "globex"}
