"""Review through the gateway: a fronted server's tools stay quarantined until an admin with the registry role
accepts each one over the admin API (pinned by hash, stored in Redis, audited), with the real filesystem server
over stdio, the gateway under uvicorn and an agent on a real MCP client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.config.settings import Settings
from gateway.config.upstreams import UpstreamSection
from gateway.principal import KeyKind
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from tests.support.agents import agent, make_key
from tests.support.mcp_servers import NodeServer, fronting_settings
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio


def _settings(redis_url: str, server: NodeServer, folder: Path) -> Settings:
    """The filesystem server fronted with no review at all in the config file."""
    section = UpstreamSection(transport="stdio", command=str(server.node), args=[str(server.entry), str(folder)])
    return fronting_settings(redis_url, "files", section, roles=("staff", "approver"), registry_poll_seconds=0.2)


async def _api(base: str, key: str, method: str, path: str, body: Any = None) -> httpx.Response:
    async with httpx.AsyncClient(base_url=f"{base}/admin/api", timeout=10) as http:
        return await http.request(method, path, json=body, headers={"authorization": f"Bearer {key}"})


async def _listed(base: str, admin: str) -> dict[str, dict[str, Any]]:
    """The upstream's tools as the review shows them, once a gateway has read its list."""
    with anyio.fail_after(20):
        while True:
            answer = await _api(base, admin, "GET", "/upstreams/files")
            assert answer.status_code == 200, answer.text
            if answer.json()["tools"]:
                return {tool["name"]: tool for tool in answer.json()["tools"]}
            await anyio.sleep(0.1)


async def _agent_tools(base: str, token: str) -> set[str]:
    async with agent(f"{base}/mcp", token) as client:
        return {tool.name for tool in (await client.list_tools()).tools if tool.name.startswith("files_")}


async def test_tools_stay_quarantined_until_a_registry_admin_accepts_each_as_listed(
    filesystem_server: NodeServer, tmp_path: Path, redis: Redis, redis_url: str
) -> None:
    """Nothing is served before a review; the review shows each tool with the upstream's hints as suggestions;
    accepted with the listed hash, the one tool is served (to the roles named), audited, and still served by a
    gateway started afterwards: the review is stored, not held in the process."""
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "notes.txt").write_text("draft\n")
    settings = _settings(redis_url, filesystem_server, folder)
    admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))
    staff = await make_key(redis, roles=("staff",))
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        tools = await _listed(base, admin)
        assert {"read_text_file", "write_file", "edit_file", "move_file"} <= set(tools)
        assert all(tool["state"] == "quarantined" and tool["reason"] == "unreviewed" for tool in tools.values())
        read = tools["read_text_file"]
        assert read["suggestion"].get("readOnlyHint") is True and read["review"] is None
        assert await _agent_tools(base, staff) == set()  # listed upstream, reviewed by nobody: not served
        review = {"mode": "read", "definition": read["listed_hash"], "roles": ["staff"], "trusted_output": True}
        accepted = await _api(base, admin, "PUT", "/upstreams/files/tools/read_text_file", review)
        assert accepted.status_code == 200, accepted.text
        with anyio.fail_after(20):
            while await _agent_tools(base, staff) != {"files_read_text_file"}:
                await anyio.sleep(0.1)
        async with agent(f"{base}/mcp", staff) as client:
            answered = await client.call_tool("files_read_text_file", {"path": str(folder / "notes.txt")})
        assert not answered.is_error and "draft" in str(answered.structured_content)
        shown = await _listed(base, admin)
        assert shown["read_text_file"]["state"] == "served"
        assert shown["read_text_file"]["reviewed_by"] == "root@acme.example"
        assert shown["write_file"]["state"] == "quarantined"  # reviewed one by one
    events = await RedisStreamAuditSink(redis, secret=TEST_AUDIT_SECRET.encode()).recent(200)
    [event] = [e for e in events if e.action == "upstreams.accept"]
    assert event.outcome == "ok" and event.subject == "root@acme.example"
    assert event.extra["upstream_tool"] == "read_text_file" and event.extra["hash"] == read["listed_hash"]
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        with anyio.fail_after(20):
            while await _agent_tools(base, staff) != {"files_read_text_file"}:
                await anyio.sleep(0.1)


async def test_a_review_is_refused_unless_it_pins_the_listed_definition_by_a_registry_admin(
    filesystem_server: NodeServer, tmp_path: Path, redis: Redis, redis_url: str
) -> None:
    """Another hash than the listed one is a conflict; an admin without the registry role, a review without a
    class or an access rule, a tool not listed: each refused with its code, audited, and nothing served."""
    settings = _settings(redis_url, filesystem_server, tmp_path)
    admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))
    approver = await make_key(redis, kind=KeyKind.ADMIN, subject="bob@acme.example", roles=("approver",))
    staff = await make_key(redis, roles=("staff",))
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        listed = (await _listed(base, admin))["write_file"]["listed_hash"]
        good = {"mode": "write", "definition": listed, "roles": ["staff"]}
        path = "/upstreams/files/tools/write_file"
        refusals = [
            (admin, path, {**good, "definition": "sha256:" + "0" * 64}, 409, "CONFLICT"),
            (approver, path, good, 403, "PERMISSION_DENIED"),
            (admin, path, {"definition": listed, "roles": ["staff"]}, 422, "VALIDATION_ERROR"),
            (admin, path, {"mode": "write", "definition": listed}, 422, "VALIDATION_ERROR"),
            (admin, "/upstreams/files/tools/format_disk", good, 404, "NOT_FOUND"),
            # Not an upstream the admin's org serves: the same refusal whether or not it exists.
            (admin, "/upstreams/other/tools/write_file", good, 403, "PERMISSION_DENIED"),
        ]
        for key, where, body, status, code in refusals:
            answer = await _api(base, key, "PUT", where, body)
            assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), (where, body)
        assert (await _api(base, approver, "GET", "/upstreams/")).status_code == 403
        async with httpx.AsyncClient(timeout=10) as http:  # an agent's key opens no admin route
            answer = await http.get(f"{base}/admin/api/upstreams/", headers={"authorization": f"Bearer {staff}"})
        assert answer.status_code == 401
        assert (await _listed(base, admin))["write_file"]["state"] == "quarantined"
        assert await _agent_tools(base, staff) == set()
    events = await RedisStreamAuditSink(redis, secret=TEST_AUDIT_SECRET.encode()).recent(200)
    denied = [e.code for e in events if e.action == "upstreams.accept" and e.outcome == "deny"]
    assert sorted(denied) == sorted(code for *_, code in refusals)
