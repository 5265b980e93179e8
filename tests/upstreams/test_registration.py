"""A service registers its own MCP server through the registry API: stored, connected by the running gateway, its
tools quarantined until a registry admin reviews them; what a service may not register is refused and audited.
The pinned mcp-server-git over Streamable HTTP, the gateway under uvicorn, an agent on a real MCP client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from redis.asyncio import Redis
from starlette.datastructures import Secret

from backends.serve import serve_app_in_thread
from gateway.config.settings import OrgSettings, Settings
from gateway.principal import KeyKind
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from tests.support.agents import agent, make_key
from tests.support.mcp_servers import changing_over_http, git_over_http
from tests.support.redis_server import free_port
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio


def _settings(redis_url: str, *, poll_seconds: float) -> Settings:
    return Settings(
        redis_url=redis_url,
        adapters={},
        orgs=(OrgSettings(name="acme", adapters=frozenset({"gitsvc"}), roles=frozenset({"staff"})),),
        audit_secret=Secret(TEST_AUDIT_SECRET),
        registry_poll_seconds=poll_seconds,
        registry_allowed_base_urls=("http://127.0.0.1:*",),
        secrets={"GITSVC_TOKEN": "the-gateways-token"},
    )


async def _call(base: str, key: str, method: str, path: str, body: Any = None) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        return await http.request(method, path, json=body, headers={"authorization": f"Bearer {key}"})


async def test_a_service_registers_its_mcp_server_and_its_tools_wait_for_a_registry_admin(
    git_server: Path, repo: Path, tmp_path: Path, redis: Redis, redis_url: str
) -> None:
    """Registered over HTTP, the server is connected by the running gateway and listed for review, nothing served;
    accepted by a registry admin, git_log reads for an agent. A second service cannot take the name, and a
    program to run, reviews of its own, a URL outside the allowlist or a secret outside its namespace are refused."""
    settings = _settings(redis_url, poll_seconds=0.2)
    service = await make_key(redis, kind=KeyKind.SERVICE, subject="git-team")
    other = await make_key(redis, kind=KeyKind.SERVICE, subject="someone-else")
    admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))
    staff = await make_key(redis, roles=("staff",))
    headers = tmp_path / "authorization.log"
    async with git_over_http(git_server, repo, free_port(), headers) as url:
        registration = {"transport": "http", "url": url, "token_env": "GITSVC_TOKEN"}
        with serve_app_in_thread(create_app(settings), lifespan=True) as base:
            refusals = [
                (service, {"transport": "stdio", "command": "/bin/sh"}, 422),
                (
                    service,
                    {
                        **registration,
                        "tools": {"git_log": {"mode": "read", "definition": "sha256:" + "0" * 64, "public": True}},
                    },
                    422,
                ),  # fmt: skip
                (service, {**registration, "url": "http://169.254.169.254/mcp"}, 422),
                (service, {**registration, "token_env": "COUNTERSIGN_AUDIT_SECRET"}, 422),
                (admin, registration, 401),  # the registry API takes service keys only
            ]
            for key, body, status in refusals:
                answer = await _call(base, key, "PUT", "/registry/api/upstreams/gitsvc", body)
                assert answer.status_code == status, (body, answer.text)
            accepted = await _call(base, service, "PUT", "/registry/api/upstreams/gitsvc", registration)
            assert accepted.status_code == 200, accepted.text
            taken = await _call(base, other, "PUT", "/registry/api/upstreams/gitsvc", registration)
            assert (taken.status_code, taken.json()["error"]["code"]) == (403, "PERMISSION_DENIED")
            with anyio.fail_after(30):
                while True:
                    shown = await _call(base, admin, "GET", "/admin/api/upstreams/gitsvc")
                    assert shown.status_code == 200, shown.text
                    tools = {tool["name"]: tool for tool in shown.json()["tools"]}
                    if "git_log" in tools:
                        break
                    await anyio.sleep(0.1)
            assert all(tool["state"] == "quarantined" for tool in tools.values())
            async with agent(f"{base}/mcp", staff) as client:
                assert not [t for t in (await client.list_tools()).tools if t.name.startswith("gitsvc_")]
            review = {"mode": "read", "definition": tools["git_log"]["listed_hash"], "roles": ["staff"]}
            answer = await _call(base, admin, "PUT", "/admin/api/upstreams/gitsvc/tools/git_log", review)
            assert answer.status_code == 200, answer.text
            with anyio.fail_after(30):
                while True:
                    async with agent(f"{base}/mcp", staff) as client:
                        if "gitsvc_git_log" in {t.name for t in (await client.list_tools()).tools}:
                            read = await client.call_tool("gitsvc_git_log", {"repo_path": str(repo)})
                            break
                    await anyio.sleep(0.1)
            assert not read.is_error, read
    assert set(headers.read_text().splitlines()) == {"Bearer the-gateways-token"}
    events = await RedisStreamAuditSink(redis, secret=TEST_AUDIT_SECRET.encode()).recent(300)
    outcomes = [(e.subject, e.outcome) for e in events if e.action == "upstreams.register"]
    assert outcomes.count(("git-team", "deny")) == 4 and ("git-team", "ok") in outcomes
    assert ("someone-else", "deny") in outcomes


async def test_a_server_registered_again_at_a_new_url_is_followed_once_a_registry_admin_accepts_it(
    git_server: Path, repo: Path, tmp_path: Path, redis: Redis, redis_url: str
) -> None:
    """gitsvc is registered at one server and git_log reviewed; the service registers it again at a second server.
    Until a registry admin accepts the new URL (naming the proposal's hash and acknowledging ``url``), reads go to
    the first server; once accepted, the running gateway (its poll an hour away) sends them to the second only,
    the review still holding (the same definition, pinned by hash)."""
    settings = _settings(redis_url, poll_seconds=3600)
    service = await make_key(redis, kind=KeyKind.SERVICE, subject="git-team")
    admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))
    staff = await make_key(redis, roles=("staff",))
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    async with (
        git_over_http(git_server, repo, free_port(), first_log) as first,
        git_over_http(git_server, repo, free_port(), second_log) as second,
    ):
        with serve_app_in_thread(create_app(settings), lifespan=True) as base:

            async def register(url: str) -> str:
                body = {"transport": "http", "url": url, "token_env": "GITSVC_TOKEN"}
                answer = await _call(base, service, "PUT", "/registry/api/upstreams/gitsvc", body)
                assert answer.status_code == 200, answer.text
                return str(answer.json()["message"])

            async def read() -> Any:
                async with agent(f"{base}/mcp", staff) as client:
                    if "gitsvc_git_log" not in {t.name for t in (await client.list_tools()).tools}:
                        return None
                    return await client.call_tool("gitsvc_git_log", {"repo_path": str(repo)})

            async def accept(body: Any) -> httpx.Response:
                return await _call(base, admin, "PUT", "/admin/api/upstreams/gitsvc/registration", body)

            await register(first)
            with anyio.fail_after(30):
                while "git_log" not in (tools := await _listed(base, admin)):
                    await anyio.sleep(0.1)
            review = {"mode": "read", "definition": tools["git_log"]["listed_hash"], "roles": ["staff"]}
            answer = await _call(base, admin, "PUT", "/admin/api/upstreams/gitsvc/tools/git_log", review)
            assert answer.status_code == 200, answer.text
            with anyio.fail_after(30):
                while (before := await read()) is None:
                    await anyio.sleep(0.1)
            assert not before.is_error and _lines(second_log) == 0
            assert "registry admin" in await register(second)
            shown = (await _call(base, admin, "GET", "/admin/api/upstreams/gitsvc")).json()
            assert (shown["url"], shown["proposed"]["url"], shown["attention"]) == (first, second, ["url"])
            held = await read()
            assert held is not None and not held.is_error and _lines(second_log) == 0
            unseen = await accept({"hash": shown["proposed_hash"], "acknowledge": []})
            assert (unseen.status_code, unseen.json()["error"]["code"]) == (422, "VALIDATION_ERROR")
            stale = await accept({"hash": "sha256:" + "0" * 64, "acknowledge": ["url"]})
            assert (stale.status_code, stale.json()["error"]["code"]) == (409, "CONFLICT")
            assert _lines(second_log) == 0
            accepted = await accept({"hash": shown["proposed_hash"], "acknowledge": ["url"]})
            assert accepted.status_code == 200, accepted.text
            with anyio.fail_after(30):
                while _lines(second_log) == 0:  # the new server is connected to
                    await anyio.sleep(0.1)
            # The switch ends with the first server left: until then the reader it replaces may still read its list
            # there (the acceptance woke it; retired, it serves nothing it reads). Quiet for half a second: left.
            with anyio.fail_after(30):
                reached_first = -1
                while reached_first != _lines(first_log):
                    reached_first = _lines(first_log)
                    await anyio.sleep(0.5)
            for _ in range(3):
                again = await read()
                assert again is not None and not again.is_error, again
            assert _lines(first_log) == reached_first
            assert (await _call(base, admin, "GET", "/admin/api/upstreams/gitsvc")).json()["url"] == second
    assert set(second_log.read_text().splitlines()) == {"Bearer the-gateways-token"}
    events = await RedisStreamAuditSink(redis, secret=TEST_AUDIT_SECRET.encode()).recent(300)
    outcomes = [e.outcome for e in events if e.action == "upstreams.accept_registration"]
    assert sorted(outcomes) == ["deny", "deny", "ok"]


@pytest.mark.slow  # a call of five seconds outlives the switch
async def test_a_call_made_on_the_server_registered_before_finishes_there_after_the_switch(
    tmp_path: Path, redis: Redis, redis_url: str
) -> None:
    """A read is running on the server as first registered (``slow``: five seconds) when a registry admin accepts the
    service's server at a new URL: the gateway switches to the new server, and lets the call already made finish on
    the old one (it answers) rather than cancel it with the old sessions."""
    settings = _settings(redis_url, poll_seconds=3600)
    service = await make_key(redis, kind=KeyKind.SERVICE, subject="git-team")
    admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))
    staff = await make_key(redis, roles=("staff",))
    async with (
        changing_over_http(free_port(), tmp_path / "first.log") as first,
        changing_over_http(free_port(), tmp_path / "second.log") as second,
        httpx.AsyncClient(timeout=10) as http,
    ):
        with serve_app_in_thread(create_app(settings), lifespan=True) as base:

            async def register(url: str) -> None:
                body = {"transport": "http", "url": url, "token_env": "GITSVC_TOKEN"}
                answer = await _call(base, service, "PUT", "/registry/api/upstreams/gitsvc", body)
                assert answer.status_code == 200, answer.text

            async def slow_calls(url: str) -> int:
                return int((await http.get(url.removesuffix("/mcp") + "/calls")).json()["slow"])

            await register(first)
            with anyio.fail_after(30):
                while "slow" not in (tools := await _listed(base, admin)):
                    await anyio.sleep(0.1)
            review = {
                "mode": "read",
                "definition": tools["slow"]["listed_hash"],
                "roles": ["staff"],
                "trusted_output": True,
            }
            answer = await _call(base, admin, "PUT", "/admin/api/upstreams/gitsvc/tools/slow", review)
            assert answer.status_code == 200, answer.text
            answers: list[Any] = []
            async with agent(f"{base}/mcp", staff) as client, anyio.create_task_group() as group:
                with anyio.fail_after(30):
                    # Asked afresh each time: the client's cache holds a list read before the review served it.
                    while "gitsvc_slow" not in {t.name for t in (await client.list_tools(cache_mode="bypass")).tools}:
                        await anyio.sleep(0.1)

                async def call() -> None:
                    answers.append(await client.call_tool("gitsvc_slow", {}))

                group.start_soon(call)
                with anyio.fail_after(10):
                    while await slow_calls(first) == 0:  # the call is running on the first server
                        await anyio.sleep(0.05)
                await register(second)
                shown = (await _call(base, admin, "GET", "/admin/api/upstreams/gitsvc")).json()
                body = {"hash": shown["proposed_hash"], "acknowledge": ["url"]}
                accepted = await _call(base, admin, "PUT", "/admin/api/upstreams/gitsvc/registration", body)
                assert accepted.status_code == 200, accepted.text
            [answered] = answers
            assert not answered.is_error, answered
            assert [json.loads(block.text) for block in answered.content] == [{"text": "done"}]
            assert (await slow_calls(first), await slow_calls(second)) == (1, 0)
            shown = (await _call(base, admin, "GET", "/admin/api/upstreams/gitsvc")).json()
            assert shown["url"] == second


async def _listed(base: str, admin: str) -> dict[str, Any]:
    shown = await _call(base, admin, "GET", "/admin/api/upstreams/gitsvc")
    return {tool["name"]: tool for tool in shown.json().get("tools", [])} if shown.status_code == 200 else {}


def _lines(log: Path) -> int:
    """How many requests reached the server logging to `log`."""
    return len(log.read_text().splitlines()) if log.exists() else 0
