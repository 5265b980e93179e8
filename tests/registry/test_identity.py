"""Registered backends learn who is asking only from a header they can verify, or get no call at all."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import jwt
import pytest
from redis.asyncio import Redis

from gateway.signing.identity import IDENTITY_HEADER, verify_identity
from tests.support.agents import agent, error_code, make_key
from tests.support.planted import PlantedBackend, notes_detail_tool
from tests.support.registration import register, remove, serving
from tests.support.services import NOTES_SIGNING_KEY

pytestmark = pytest.mark.anyio


def _manifest(base_url: str, signing_secret_env: str = "NOTES_SIGNING_KEY") -> dict[str, Any]:
    read = notes_detail_tool()
    listing = {**read, "name": "notes_recent", "description": "List recent notes.", "path": "/notes"}
    listing["input_schema"] = {"type": "object", "properties": {}, "additionalProperties": False}
    return {"base_url": base_url, "signing_secret_env": signing_secret_env, "tools": [read, listing]}


def _base(mcp_url: str) -> str:
    return mcp_url.removesuffix("/mcp")


async def test_every_request_a_registered_backend_receives_carries_an_identity_it_can_verify(
    notes_redis: Redis, notes_mcp_url: str, planted_backend: tuple[str, PlantedBackend]
) -> None:
    url, backend = planted_backend
    backend.plant({"note_id": "n1"})
    async with serving(notes_mcp_url, notes_redis, _manifest(url), "notes") as (_admin, agent_key):
        backend.forget()
        async with agent(notes_mcp_url, agent_key) as client:
            assert not (await client.call_tool("notes_detail", {"note_id": "n1"})).is_error
            assert not (await client.call_tool("notes_recent", {})).is_error
    received = backend.requests
    assert [path for path, _headers in received] == [b"/notes/n1/detail", b"/notes"]
    for _path, headers in received:
        claims = verify_identity(headers[IDENTITY_HEADER], key=NOTES_SIGNING_KEY, adapter="notes")
        assert claims == {"sub": "alice@acme.example", "org": "acme"}


async def test_a_pinned_adapter_whose_signing_secret_is_unset_is_not_served(
    notes_redis: Redis, notes_mcp_url: str, planted_backend: tuple[str, PlantedBackend]
) -> None:
    """Accepted, but the gateway has no ``NOTES_UNSET_KEY``: its tools are not listed, a call is refused as
    for an unknown tool, and its backend receives nothing."""
    url, backend = planted_backend
    backend.plant({"note_id": "n1"})
    proposal, admin = await register(notes_mcp_url, notes_redis, _manifest(url, "NOTES_UNSET_KEY"), "notes")
    agent_key = await make_key(notes_redis, roles=("staff",))
    backend.forget()
    try:
        async with httpx.AsyncClient(base_url=_base(notes_mcp_url), timeout=10) as http:
            accepted = await http.post(
                "/admin/api/adapters/notes/accept",
                json={"hash": proposal["proposed_hash"]},
                headers={"authorization": f"Bearer {admin}"},
            )
        assert accepted.status_code == 200, accepted.text
        # Three refresh periods (0.2 s each in tests): a negative check needs a wait.
        await anyio.sleep(0.6)
        async with agent(notes_mcp_url, agent_key) as client:
            listed = {tool.name for tool in (await client.list_tools()).tools}
            detail = await client.call_tool("notes_detail", {"note_id": "n1"})
            unknown = await client.call_tool("notes_nonexistent", {})
    finally:
        await remove(notes_mcp_url, admin, "notes")
    assert not {"notes_detail", "notes_recent"} & listed
    assert error_code(detail) == error_code(unknown) == "PERMISSION_DENIED"
    assert backend.requests == []


async def test_a_manifest_without_a_signing_secret_gets_identities_it_verifies_with_the_jwks(
    notes_redis: Redis, notes_mcp_url: str, planted_backend: tuple[str, PlantedBackend]
) -> None:
    """No shared key named: every request carries an EdDSA identity that verifies with the gateway's
    published keys, and with no shared key."""
    url, backend = planted_backend
    backend.plant({"note_id": "n1"})
    manifest = _manifest(url)
    del manifest["signing_secret_env"]
    async with serving(notes_mcp_url, notes_redis, manifest, "notes") as (_admin, agent_key):
        backend.forget()
        async with agent(notes_mcp_url, agent_key) as client:
            assert not (await client.call_tool("notes_detail", {"note_id": "n1"})).is_error
        async with httpx.AsyncClient(base_url=_base(notes_mcp_url), timeout=10) as http:
            jwks = (await http.get("/.well-known/jwks.json")).json()
    [(_path, headers)] = backend.requests
    claims = verify_identity(headers[IDENTITY_HEADER], adapter="notes", jwks=jwks)
    assert claims == {"sub": "alice@acme.example", "org": "acme"}
    with pytest.raises(jwt.InvalidTokenError):
        verify_identity(headers[IDENTITY_HEADER], key=NOTES_SIGNING_KEY, adapter="notes")
