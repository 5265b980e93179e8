"""Registering a manifest with the session gateway and accepting it, as a service and an admin would."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
from redis.asyncio import Redis

from gateway.principal import KeyKind
from tests.support.agents import agent, make_key


def _base(mcp_url: str) -> str:
    return mcp_url.removesuffix("/mcp")


async def register(mcp_url: str, redis: Redis, manifest: dict[str, Any], name: str) -> tuple[dict[str, Any], str]:
    """Register `manifest` as adapter `name` with a new service key; return the proposal and an admin key."""
    service = await make_key(redis, kind=KeyKind.SERVICE, subject=f"{name}-svc", org="acme", roles=())
    admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry", "approver"))
    async with httpx.AsyncClient(base_url=_base(mcp_url), timeout=10) as http:
        registered = await http.put(
            f"/registry/api/adapters/{name}", json=manifest, headers={"authorization": f"Bearer {service}"}
        )
    assert registered.status_code == 202, registered.text
    proposal: dict[str, Any] = registered.json()["adapter"]
    return proposal, admin


async def review(mcp_url: str, admin: str, name: str) -> dict[str, Any]:
    """What an admin reviewing adapter `name` is shown (flags, diff)."""
    async with httpx.AsyncClient(base_url=_base(mcp_url), timeout=10) as http:
        response = await http.get(f"/admin/api/adapters/{name}", headers={"authorization": f"Bearer {admin}"})
    assert response.status_code == 200, response.text
    entry: dict[str, Any] = response.json()
    return entry


async def register_and_accept(mcp_url: str, redis: Redis, manifest: dict[str, Any], name: str) -> tuple[str, str]:
    """Register `manifest` as adapter `name`, accept it, and wait until agents see its first tool.

    Returns ``(admin key, agent key)``; the agent is alice@acme.example with the staff role.
    """
    proposal, admin = await register(mcp_url, redis, manifest, name)
    agent_key = await make_key(redis, roles=("staff",))
    async with httpx.AsyncClient(base_url=_base(mcp_url), timeout=10) as http:
        accepted = await http.post(
            f"/admin/api/adapters/{name}/accept",
            json={"hash": proposal["proposed_hash"]},
            headers={"authorization": f"Bearer {admin}"},
        )
        assert accepted.status_code == 200, accepted.text
    first = manifest["tools"][0]["name"]
    with anyio.fail_after(10):
        while True:
            async with agent(mcp_url, agent_key) as client:
                if first in {tool.name for tool in (await client.list_tools()).tools}:
                    return admin, agent_key
            await anyio.sleep(0.1)


@asynccontextmanager
async def serving(mcp_url: str, redis: Redis, manifest: dict[str, Any], name: str) -> AsyncIterator[tuple[str, str]]:
    """Adapter `name` registered from `manifest`, accepted and served for the block (`register_and_accept`), and
    removed after it, however it ends. Yields ``(admin key, agent key)``."""
    admin, agent_key = await register_and_accept(mcp_url, redis, manifest, name)
    try:
        yield admin, agent_key
    finally:
        await remove(mcp_url, admin, name)


async def remove(mcp_url: str, admin: str, name: str) -> None:
    async with httpx.AsyncClient(base_url=_base(mcp_url), timeout=10) as http:
        await http.delete(f"/admin/api/adapters/{name}", headers={"authorization": f"Bearer {admin}"})


def issues_manifest(base_url: str, **contract: Any) -> dict[str, Any]:
    """Adapter ``notes`` as a reviewer would want to read it: a read of a list (free text, a trusted address, a
    number) and a create whose key rides as a marker in the body, one input sent as a header; `contract`
    changes the create's write contract."""
    issue = {
        "type": "object",
        "properties": {
            "number": {"type": "integer"},
            "title": {"type": "string"},
            "html_url": {"type": "string", "pattern": "^https://example\\.com/[0-9]+$"},
            "labels": {"type": "array", "items": {"type": "string"}},
        },
    }
    listing = {
        "name": "notes_list_issues",
        "description": "List the issues of a repository.",
        "mode": "read",
        "method": "GET",
        "path": "/repos/{repo}/issues",
        "input_schema": {
            "type": "object",
            "properties": {"repo": {"type": "string"}, "state": {"type": "string", "enum": ["open", "closed"]}},
            "required": ["repo"],
            "additionalProperties": False,
        },
        "output_schema": {"type": "array", "items": issue},
        "access": {"roles": ["staff"]},
    }
    create = {
        "name": "notes_create_issue",
        "description": "Open an issue.",
        "mode": "write",
        "method": "POST",
        "path": "/repos/{repo}/issues",
        "input_schema": {
            "type": "object",
            "properties": {
                "repo": {"type": "string"},
                "title": {"type": "string"},
                "body": {"type": "string"},
                "api_version": {"type": "string"},
            },
            "required": ["repo", "title"],
            "additionalProperties": False,
        },
        "output_schema": {"type": "object", "properties": {"number": {"type": "integer"}}},
        "access": {"roles": ["staff"]},
        "approval": {"approver_role": "approver", "required": 2},
        "summary_template": "Open an issue in {repo}",
        "agent_text_fields": ["title", "body"],
        "send_as": {"api_version": {"in": "header", "name": "X-Api-Version"}},
        "write_contract": {
            "dedupes_on_key": False,
            "key_retention_seconds": 86400,
            "reference_field": "number",
            "key_in": "marker",
            "key_field": "body",
            "search_path": "/repos/{repo}/issues",
            "search_query": {"state": "all"},
            "match_field": "body",
        }
        | contract,
    }
    return {"base_url": base_url, "tools": [listing, create]}
