"""The gateway as an OAuth resource server, end to end: a real gateway under uvicorn, the local token
issuer (tests/support/token_issuer.py), the real MCP client, the admin API over HTTP, real Redis.

The gateway's resource is ``http://127.0.0.1:<port>/mcp``; its admin API takes tokens too. One
tool needs a scope (``rooms_book`` needs ``rooms:write``), so a token without it is 403.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import pytest
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.config.oauth import IssuerSection, OAuthSection
from gateway.principal import KeyKind
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.keys import KeyStore
from tests.support.agents import agent, make_key, payload
from tests.support.redis_server import free_port
from tests.support.services import Backend, gateway_settings
from tests.support.signing import ensure_signing_key
from tests.support.token_issuer import TokenIssuer, serve_issuer

pytestmark = pytest.mark.anyio

BOOKING = {"room_id": "room-eos", "date": "2026-12-20", "start": "09:00", "end": "10:00", "title": "Planning"}
OPEN_STATES = ("PENDING", "APPROVED", "EXECUTING")
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@dataclass(frozen=True)
class Deployed:
    base: str
    issuer: TokenIssuer
    redis_url: str

    @property
    def resource(self) -> str:
        return f"{self.base}/mcp"

    @property
    def admin_resource(self) -> str:
        return f"{self.base}/admin/api"

    def token(self, audience: str | None = None, **claims: Any) -> str:
        return self.issuer.mint(audience or self.resource, **claims)


@pytest.fixture(scope="module")
def deployed(redis_server_url: str, backends: dict[str, Backend]) -> Iterator[Deployed]:
    redis_url = urlunsplit(urlsplit(redis_server_url)._replace(path="/6"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with serve_issuer() as issuer:
        oauth = OAuthSection(
            resource=f"{base}/mcp",
            admin_resource=f"{base}/admin/api",
            tool_scopes={"rooms_book": ["rooms:write"]},
            issuers={"corp": IssuerSection(issuer=issuer.url, surfaces=["mcp", "admin"], min_refresh_seconds=0)},
        )
        settings = replace(gateway_settings(redis_url, backends), oauth=oauth)
        with serve_app_in_thread(create_app(settings), port=port, lifespan=True):
            yield Deployed(base=base, issuer=issuer, redis_url=redis_url)


@pytest.fixture
async def store(deployed: Deployed) -> AsyncIterator[Redis]:
    client = Redis.from_url(deployed.redis_url, decode_responses=False)
    try:
        await client.flushdb()
        await ensure_signing_key(client)
        yield client
    finally:
        await client.aclose()


async def _audit(store: Redis, action: str) -> list[Any]:
    return [event for event in await RedisStreamAuditSink(store).recent(200) if event.action == action]


async def test_the_metadata_documents_name_the_resource_and_its_issuer(deployed: Deployed) -> None:
    """RFC 9728: the root and the path-suffixed document list the resource, the issuer and the scopes."""
    async with httpx.AsyncClient(base_url=deployed.base) as http:
        root = (await http.get("/.well-known/oauth-protected-resource")).json()
        suffixed = (await http.get("/.well-known/oauth-protected-resource/mcp")).json()
        admin = (await http.get("/.well-known/oauth-protected-resource/admin/api")).json()
    assert root == suffixed
    assert suffixed["resource"] == deployed.resource
    assert suffixed["authorization_servers"] == [deployed.issuer.url]
    assert suffixed["scopes_supported"] == ["rooms:write"] and suffixed["bearer_methods_supported"] == ["header"]
    assert admin["resource"] == deployed.admin_resource


async def test_no_credential_gets_the_challenge_without_an_error_code(deployed: Deployed) -> None:
    """RFC 6750 section 3.1: no credential, no ``error``; the challenge points at the metadata."""
    async with httpx.AsyncClient(base_url=deployed.base) as http:
        answer = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=MCP_HEADERS)
    metadata = f"{deployed.base}/.well-known/oauth-protected-resource/mcp"
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == f'Bearer realm="mcp", resource_metadata="{metadata}"'


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"exp": 1_000_000}, "token expired"),
        ({"aud": "https://elsewhere.example/mcp"}, "token is for another resource"),
        ({"iss": "https://evil.example"}, "untrusted issuer"),
    ],
)
async def test_an_invalid_token_is_401_with_the_challenge_and_audited(
    deployed: Deployed, store: Redis, claims: dict[str, Any], reason: str
) -> None:
    """Each refusal says invalid_token, names the metadata, and leaves an auth.reject event with its reason."""
    async with httpx.AsyncClient(base_url=deployed.base) as http:
        headers = {**MCP_HEADERS, "authorization": f"Bearer {deployed.token(**claims)}"}
        answer = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers)
    assert answer.status_code == 401
    challenge = answer.headers["www-authenticate"]
    assert 'error="invalid_token"' in challenge and f'error_description="{reason}"' in challenge
    assert "resource_metadata=" in challenge
    assert [event.reason for event in await _audit(store, "auth.reject")] == [reason]


async def test_the_mcp_client_with_a_token_lists_and_calls_tools(deployed: Deployed, store: Redis) -> None:
    """A token of the trusted issuer opens /mcp: tools are listed and a read runs."""
    async with agent(deployed.resource, deployed.token()) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"rooms_list", "rooms_book"} <= names
        result = await client.call_tool("rooms_list", {})
        assert not result.is_error and payload(result)["rooms"]


async def test_api_keys_keep_working_beside_tokens(deployed: Deployed, store: Redis) -> None:
    """An agent key opens the same endpoint, and scopes do not limit it."""
    key = await make_key(store)
    async with agent(deployed.resource, key) as client:
        receipt = payload(await client.call_tool("rooms_book", BOOKING))
    assert receipt["card_id"]


async def test_a_tool_needing_a_scope_the_token_lacks_is_403_insufficient_scope(
    deployed: Deployed, store: Redis
) -> None:
    """``rooms_book`` needs ``rooms:write``: without it 403 naming the scope (audited); with it, a card."""
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "rooms_book", "arguments": BOOKING}}
    async with httpx.AsyncClient(base_url=deployed.base) as http:
        headers = {**MCP_HEADERS, "authorization": f"Bearer {deployed.token(scope='rooms:read')}"}
        answer = await http.post("/mcp", json=call, headers=headers)
    assert answer.status_code == 403
    challenge = answer.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge and 'scope="rooms:write"' in challenge
    assert "resource_metadata=" in challenge
    error = answer.json()["error"]  # a JSON-RPC error object, as every refusal on /mcp
    assert (error["data"]["code"], error["data"]["scope"], error["data"]["status"]) == (
        "PERMISSION_DENIED",
        "rooms:write",
        403,
    )
    assert "rooms:write" in error["message"]
    [refusal] = await _audit(store, "auth.scope")
    assert (refusal.code, refusal.extra["tool"]) == ("PERMISSION_DENIED", "rooms_book")
    async with agent(deployed.resource, deployed.token(scope="rooms:write")) as client:
        assert payload(await client.call_tool("rooms_book", BOOKING))["card_id"]


async def test_admin_api_accepts_an_admin_token_and_refuses_an_agent_one(deployed: Deployed, store: Redis) -> None:
    """Roles come from the token's claims; a token minted for /mcp does not open the admin API."""
    async with httpx.AsyncClient(base_url=deployed.admin_resource) as http:
        admin = deployed.token(deployed.admin_resource, sub="carol@acme.example", roles=["approver"])
        listed = await http.get("/cards", headers={"authorization": f"Bearer {admin}"})
        agents = await http.get("/cards", headers={"authorization": f"Bearer {deployed.token()}"})
    assert listed.status_code == 200
    assert agents.status_code == 401 and "resource_metadata=" in agents.headers["www-authenticate"]


async def test_nobody_in_a_delegation_chain_approves_the_card_it_produced(deployed: Deployed, store: Redis) -> None:
    """An agent acting for bob proposes; bob (by token) and the agent (by key) are refused; carol approves.

    The card shows the person and the acting agent, and so does the proposal's audit event; once
    approved, the write runs and succeeds.
    """
    act = {"sub": "agent-7@acme.example", "act": {"sub": "planner"}}
    delegated = deployed.token(sub="bob@acme.example", act=act, scope="rooms:write")
    async with agent(deployed.resource, delegated) as client:
        card_id = payload(
            await client.call_tool("rooms_book", {**BOOKING, "date": "2027-02-09", "start": "14:00", "end": "15:00"})
        )["card_id"]

    def bearer(token: str) -> dict[str, str]:
        return {"authorization": f"Bearer {token}"}

    bob = deployed.token(deployed.admin_resource, sub="bob@acme.example", roles=["approver"])
    carol = deployed.token(deployed.admin_resource, sub="carol@acme.example", roles=["approver"])
    actor_key = await make_key(store, subject="agent-7@acme.example", roles=("approver",), kind=KeyKind.ADMIN)
    async with httpx.AsyncClient(base_url=deployed.admin_resource) as http:
        card = (await http.get(f"/cards/{card_id}", headers=bearer(carol))).json()["card"]
        body = {"version": card["version"], "args_hash": card["args_hash"], "comment": "ok"}
        by_bob = await http.post(f"/cards/{card_id}/approve", json=body, headers=bearer(bob))
        by_actor = await http.post(f"/cards/{card_id}/approve", json=body, headers=bearer(actor_key))
        by_carol = await http.post(f"/cards/{card_id}/approve", json=body, headers=bearer(carol))
    assert card["requester"]["subject"] == "bob@acme.example"
    assert card["requester"]["acting_client"] == "agent-7@acme.example"
    assert card["requester"]["actors"] == ["agent-7@acme.example", "planner"]
    assert by_bob.status_code == by_actor.status_code == 403
    assert by_bob.json()["error"]["code"] == by_actor.json()["error"]["code"] == "PERMISSION_DENIED"
    assert by_carol.status_code == 200 and by_carol.json()["card"]["state"] == "APPROVED"
    [proposed] = await _audit(store, "card.propose")
    assert (proposed.subject, proposed.extra["acting_client"]) == ("bob@acme.example", "agent-7@acme.example")
    # The write runs for the principal the card recorded: a token is not looked up again as a key is.
    with anyio.fail_after(15):
        async with httpx.AsyncClient(base_url=deployed.admin_resource, headers=bearer(carol)) as http:
            while (state := (await http.get(f"/cards/{card_id}")).json()["card"]["state"]) in OPEN_STATES:
                await anyio.sleep(0.05)
    assert state == "SUCCEEDED"


async def test_a_look_alike_admin_key_of_the_tokens_person_cannot_approve_their_card(
    deployed: Deployed, store: Redis
) -> None:
    """One person, one identity across credentials: dana proposes with an OAuth token; an admin key minted
    (allowed by the operator) for ``d\u0430na`` with a Cyrillic ``а`` is dana to a reader, and is refused."""
    async with agent(deployed.resource, deployed.token(sub="dana@acme.example", scope="rooms:write")) as client:
        booking = {**BOOKING, "date": "2027-02-11", "start": "08:00", "end": "09:00"}
        card_id = payload(await client.call_tool("rooms_book", booking))["card_id"]
    look_alike, _ = await KeyStore(store).create(
        kind=KeyKind.ADMIN, subject="d\u0430na@acme.example", org="acme", roles=("approver",), allow_mixed_scripts=True
    )
    async with httpx.AsyncClient(base_url=deployed.admin_resource) as http:
        headers = {"authorization": f"Bearer {look_alike}"}
        card = (await http.get(f"/cards/{card_id}", headers=headers)).json()["card"]
        body = {"version": card["version"], "args_hash": card["args_hash"], "comment": "mine"}
        refused = await http.post(f"/cards/{card_id}/approve", json=body, headers=headers)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "PERMISSION_DENIED"
    [denied] = [e for e in await _audit(store, "card.approve") if e.outcome == "deny"]
    assert denied.code == "PERMISSION_DENIED"


async def test_a_revoked_person_s_tokens_are_refused_and_their_approved_card_does_not_run(
    deployed: Deployed, store: Redis
) -> None:
    """erin proposes with a token and carol approves; erin is revoked as a whole before the worker runs the card.
    The card ends FAILED with REQUESTER_REVOKED, nothing sent, audited; a new token the issuer mints for erin
    (under any spelling) is refused 401 and audited."""
    async with agent(deployed.resource, deployed.token(sub="erin@acme.example", scope="rooms:write")) as client:
        booking = {**BOOKING, "date": "2027-02-12", "start": "08:00", "end": "09:00"}
        card_id = payload(await client.call_tool("rooms_book", booking))["card_id"]
    # Revoked before the approval, so no worker can have run the card before the revocation is read.
    await KeyStore(store).revoke_subject("acme", "ERIN@acme.example", by="test")
    carol_token = deployed.token(deployed.admin_resource, sub="carol@acme.example", roles=["approver"])
    carol = {"authorization": f"Bearer {carol_token}"}
    async with httpx.AsyncClient(base_url=deployed.admin_resource, headers=carol) as http:
        card = (await http.get(f"/cards/{card_id}")).json()["card"]
        body = {"version": card["version"], "args_hash": card["args_hash"], "comment": "ok"}
        assert (await http.post(f"/cards/{card_id}/approve", json=body)).status_code == 200
        with anyio.fail_after(15):
            while (card := (await http.get(f"/cards/{card_id}")).json()["card"])["state"] in OPEN_STATES:
                await anyio.sleep(0.05)
    assert card["state"] == "FAILED" and card["evidence"]["code"] == "REQUESTER_REVOKED", card
    executed = [e for e in await _audit(store, "card.execute") if e.extra.get("card_id") == card_id]
    assert [(e.outcome, e.code) for e in executed] == [("FAILED", "REQUESTER_REVOKED")]
    async with httpx.AsyncClient(base_url=deployed.base) as http:
        headers = {**MCP_HEADERS, "authorization": f"Bearer {deployed.token(sub='erin@acme.example')}"}
        answer = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers)
    assert answer.status_code == 401 and answer.json()["error"]["data"]["code"] == "UNAUTHENTICATED"
    assert "the token's subject is revoked" in [e.reason for e in await _audit(store, "auth.reject")]
