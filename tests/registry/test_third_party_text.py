"""Registered tools end to end, through the real MCP client: what a service writes never reaches the model."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.store.audit_stream import RedisStreamAuditSink
from tests.support.agents import agent, error_code, everything_the_model_sees, payload
from tests.support.canaries import CANARY, HOSTILE
from tests.support.planted import PlantedBackend
from tests.support.registration import register_and_accept, remove

pytestmark = pytest.mark.anyio

_TEXT = {"type": "string"}
NOTES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summary": _TEXT,
        "notes": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": _TEXT,
                    "body": _TEXT,
                    "tags": {"type": "array", "items": _TEXT},
                    "grid": {"type": "array", "items": {"type": "array", "items": _TEXT}},
                    "author": {"type": "object", "properties": {"name": _TEXT}},
                },
                "required": ["id"],
            },
        },
    },
    "required": ["notes"],
}
MARKED = ["summary", "notes[].body", "notes[].tags[]", "notes[].grid[][]", "notes[].author.name"]


def _manifest(base_url: str) -> dict[str, Any]:
    return {
        "base_url": base_url,
        "signing_secret_env": "NOTES_SIGNING_KEY",
        "tools": [
            {
                "name": "notes_list",
                "description": "List the notes.",
                "mode": "read",
                "method": "GET",
                "path": "/notes",
                "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
                "output_schema": NOTES_SCHEMA,
                "access": {"public": True},
                "untrusted_output_fields": MARKED,
            }
        ],
    }


def _hostile(n: int) -> str:
    return f"{HOSTILE}{CANARY}-{n}"


async def test_marked_strings_in_every_shape_never_reach_the_model(
    notes_redis: Redis, notes_mcp_url: str, planted_backend: tuple[str, PlantedBackend]
) -> None:
    """Lists of strings, lists of lists, optional objects inside lists: the content and the structured
    content the model receives hold none of the planted canaries; the unmarked ids come through."""
    url, backend = planted_backend
    backend.plant(
        {
            "summary": _hostile(0),
            "notes": [
                {
                    "id": "n1",
                    "body": _hostile(1),
                    "tags": [_hostile(2), _hostile(3)],
                    "grid": [[_hostile(4)], [], [_hostile(5), _hostile(6)]],
                    "author": {"name": _hostile(7)},
                },
                {"id": "n2", "tags": [], "author": None},
            ],
        }
    )
    admin, agent_key = await register_and_accept(notes_mcp_url, notes_redis, _manifest(url), "notes")
    try:
        async with agent(notes_mcp_url, agent_key) as client:
            result = await client.call_tool("notes_list", {})
    finally:
        await remove(notes_mcp_url, admin, "notes")
    assert not result.is_error
    assert CANARY not in everything_the_model_sees(result)
    assert [note["id"] for note in payload(result)["notes"]] == ["n1", "n2"]


async def test_a_refusal_reaches_the_model_as_a_code_and_the_backends_words_reach_the_audit(
    notes_redis: Redis, notes_mcp_url: str, planted_backend: tuple[str, PlantedBackend]
) -> None:
    """A 409 whose error code carries a canary: the model reads CONFLICT and the fixed message; the code
    itself is on the human channel, the audit event's reason."""
    url, backend = planted_backend
    backend.plant({"error": f"taken_{CANARY}", "message": _hostile(8)}, status=409)
    admin, agent_key = await register_and_accept(notes_mcp_url, notes_redis, _manifest(url), "notes")
    try:
        async with agent(notes_mcp_url, agent_key) as client:
            result = await client.call_tool("notes_list", {})
    finally:
        await remove(notes_mcp_url, admin, "notes")
    assert error_code(result) == "CONFLICT"
    assert CANARY not in everything_the_model_sees(result)
    calls = [e for e in await RedisStreamAuditSink(notes_redis).recent(50) if e.action == "tool.call"]
    assert any(f"taken_{CANARY}" in e.reason for e in calls)
