"""Both protocol eras toward an upstream over Streamable HTTP, with the gateway's own credentials only: the pinned
mcp-server-git served over HTTP by the MCP SDK it ships with (`tests.support.git_over_http`), the 2026-07-28
stateless requests negotiated by ``auto`` and the 2025-11-25 session kept by ``legacy``; a restarted server is
reconnected to."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import jwt
import pytest
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.config.settings import Settings
from gateway.config.upstreams import DEFAULT_SESSIONS, OAuthClientSection, ToolReview, UpstreamSection
from gateway.runtime.app import create_app
from gateway.runtime.upstreams import fronting
from gateway.store.keys import KeyStore
from gateway.upstreams.connection import UpstreamConnection
from gateway.upstreams.review import definition_hash
from tests.support.agents import agent, make_key
from tests.support.mcp_servers import fronting_settings, git_over_http
from tests.support.redis_server import free_port
from tests.support.services import in_process_gateway
from tests.support.token_issuer import serve_issuer

pytestmark = pytest.mark.anyio

GATEWAY_TOKEN = "gateway-own-token-for-git"


def _section(url: str, protocol: str, reviews: dict[str, ToolReview] | None = None) -> UpstreamSection:
    return UpstreamSection(
        transport="http",
        url=url,
        protocol=protocol,  # type: ignore[arg-type]
        token_env="GIT_UPSTREAM_TOKEN",
        tools=reviews or {},
    )


def _settings(redis_url: str, section: UpstreamSection, **more: Any) -> Settings:
    return fronting_settings(redis_url, "git", section, secrets={"GIT_UPSTREAM_TOKEN": GATEWAY_TOKEN}, **more)


async def _reviewed(url: str, protocol: str) -> tuple[dict[str, ToolReview], str | None]:
    """git_log reviewed as listed (read, staff), and the era the server was spoken to in."""
    probe = UpstreamConnection("git", _section(url, protocol), secrets={"GIT_UPSTREAM_TOKEN": GATEWAY_TOKEN})
    async with probe.running():
        listing = {tool["name"]: tool for tool in await probe.list_tools()}
        era = probe.protocol_version
    return {"git_log": ToolReview(mode="read", definition=definition_hash(listing["git_log"]), roles=["staff"])}, era


@pytest.mark.parametrize(("protocol", "era"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
async def test_either_era_over_streamable_http_with_the_gateways_token_only(
    git_server: Path, repo: Path, tmp_path: Path, redis: Redis, redis_url: str, protocol: str, era: str
) -> None:
    """An agent reads git_log through the gateway (uvicorn, a real MCP client) in the era negotiated; every request
    that reached the server carried the gateway's own bearer token, never the agent's."""
    headers = tmp_path / "authorization.log"
    async with git_over_http(git_server, repo, free_port(), headers) as url:
        reviews, negotiated = await _reviewed(url, protocol)
        assert negotiated == era
        token = await make_key(redis, roles=("staff",))
        settings = _settings(redis_url, _section(url, protocol, reviews))
        with serve_app_in_thread(create_app(settings), lifespan=True) as base:
            async with agent(f"{base}/mcp", token) as client:
                assert "git_git_log" in {tool.name for tool in (await client.list_tools()).tools}
                read = await client.call_tool("git_git_log", {"repo_path": str(repo)})
                assert not read.is_error, read
    seen = headers.read_text().splitlines()
    assert seen and set(seen) == {f"Bearer {GATEWAY_TOKEN}"}
    assert not any(token in line for line in seen)


@pytest.mark.slow  # two server starts and the reconnect's backoff: 10-30 s on a loaded machine
async def test_a_restarted_server_is_reconnected_to_in_the_session_era(
    git_server: Path, repo: Path, tmp_path: Path, redis: Redis, redis_url: str
) -> None:
    """The server restarts, and its 2025-11-25 session is gone with it: the call that finds out is refused as
    unavailable (a read, nothing to settle), the gateway opens a new session, and the next read answers."""
    port = free_port()
    async with git_over_http(git_server, repo, port, tmp_path / "1.log") as url:
        reviews, _era = await _reviewed(url, "legacy")
    settings = _settings(redis_url, _section(url, "legacy", reviews), registry_poll_seconds=60)
    staff = await KeyStore(redis).resolve(await make_key(redis, roles=("staff",)))
    assert staff is not None
    async with in_process_gateway(settings, []) as gateway, contextlib.AsyncExitStack() as before:
        await before.enter_async_context(git_over_http(git_server, repo, port, tmp_path / "2.log"))
        async with fronting(
            settings.upstreams,
            gateway.live,
            reviews=gateway.upstream_reviews,
            secrets=settings.secrets,
            poll_seconds=60,
        ) as connections:
            first = await gateway.executor.agent.execute(staff, "git_git_log", {"repo_path": str(repo)})
            assert first.code is None
            with anyio.fail_after(30):
                while connections["git"].open_sessions < DEFAULT_SESSIONS:
                    await anyio.sleep(0.05)
            opened = connections["git"].connects
            await before.aclose()  # the server stops, and its sessions with it
            async with git_over_http(git_server, repo, port, tmp_path / "3.log"):
                with anyio.fail_after(30):
                    while True:
                        again = await gateway.executor.agent.execute(staff, "git_git_log", {"repo_path": str(repo)})
                        if again.code is None:
                            break
                        assert again.code == "UPSTREAM_UNAVAILABLE", again.code
                        await anyio.sleep(0.1)
            assert connections["git"].connects > opened


async def test_an_oauth_access_token_is_fetched_once_and_sent_instead_of_the_agents(
    git_server: Path, repo: Path, tmp_path: Path, redis: Redis, redis_url: str
) -> None:
    """With client credentials configured, the gateway gets an access token from the authorization server (its
    secret read by reference), caches it, and every request to the upstream carries that token: the agent's never."""
    headers = tmp_path / "authorization.log"
    with serve_issuer() as issuer:
        issuer.clients["countersign-gateway"] = "client-secret-of-the-gateway"
        oauth = OAuthClientSection(
            token_url=f"{issuer.url}/token",
            client_id="countersign-gateway",
            client_secret_env="GIT_UPSTREAM_CLIENT_SECRET",
            scope="git:read",
        )
        async with git_over_http(git_server, repo, free_port(), headers) as url:
            reviews, _era = await _reviewed(url, "auto")
            section = _section(url, "auto", reviews).model_copy(update={"token_env": None, "oauth": oauth})
            secrets = {"GIT_UPSTREAM_CLIENT_SECRET": "client-secret-of-the-gateway"}
            settings = replace(_settings(redis_url, section), secrets=secrets)
            token = await make_key(redis, roles=("staff",))
            fetched_before = issuer.hits["/token"]
            probed = len(headers.read_text().splitlines())  # the review's probe, with the fixed token
            with serve_app_in_thread(create_app(settings), lifespan=True) as base:
                async with agent(f"{base}/mcp", token) as client:
                    for _ in range(3):
                        read = await client.call_tool("git_git_log", {"repo_path": str(repo)})
                        assert not read.is_error, read
        assert issuer.hits["/token"] - fetched_before == 1
    sent = headers.read_text().splitlines()[probed:]
    [used] = set(sent)
    claims = jwt.decode(used.removeprefix("Bearer "), options={"verify_signature": False})
    assert claims["client_id"] == "countersign-gateway" and claims["scope"] == "git:read"
    assert not any(token in line for line in sent) and f"Bearer {GATEWAY_TOKEN}" not in sent
