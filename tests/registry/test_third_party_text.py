"""Registered tools end to end, through the real MCP client: what a service writes never reaches the model,
unless the manifest declares it trusted (a pattern, an enum, a date) or shown to the model as untrusted (fenced,
and then it taints its reader)."""

from __future__ import annotations

from typing import Any

import pytest
from mcp_types import CallToolResult
from redis.asyncio import Redis

from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.ledger.redis_ledger import RedisLedger
from gateway.untrusted import FENCE_OPEN, WITHHELD, fence
from tests.support.agents import agent, error_code, everything_the_model_sees, payload
from tests.support.canaries import CANARY, HOSTILE
from tests.support.planted import PlantedBackend
from tests.support.registration import review, serving

pytestmark = pytest.mark.anyio

_TEXT = {"type": "string"}
_ID = {"type": "string", "pattern": "^n[0-9]+$"}
NOTES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summary": _TEXT,
        "notes": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": _ID,
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


_NO_INPUT = {"type": "object", "properties": {}, "additionalProperties": False}
_ADD = {
    "name": "notes_add",
    "description": "Add a note.",
    "mode": "write",
    "method": "POST",
    "path": "/notes",
    "input_schema": {
        "type": "object",
        "properties": {"text": {"type": "string", "maxLength": 100}},
        "required": ["text"],
        "additionalProperties": False,
    },
    "output_schema": {"type": "object", "properties": {"id": _ID}},
    "access": {"public": True},
    "approval": {"approver_role": "approver"},
    "write_contract": {
        "dedupes_on_key": True,
        "key_retention_seconds": 86400,
        "status_path": "/idempotency/{key}",
        "reference_field": "id",
    },
    "summary_template": "Add a note",
    "agent_text_fields": ["text"],
}


def _manifest(base_url: str, *, marked: list[str] | None = None, shown: list[str] | None = None) -> dict[str, Any]:
    """`notes_list` over `NOTES_SCHEMA` (with `marked` withheld explicitly, `MARKED` unless given, and `shown`
    fenced), and the write `notes_add`."""
    read: dict[str, Any] = {
        "name": "notes_list",
        "description": "List the notes.",
        "mode": "read",
        "method": "GET",
        "path": "/notes",
        "input_schema": _NO_INPUT,
        "output_schema": NOTES_SCHEMA,
        "access": {"public": True},
        "untrusted_output_fields": MARKED if marked is None else marked,
        "shown_untrusted_fields": shown or [],
    }
    return {"base_url": base_url, "signing_secret_env": "NOTES_SIGNING_KEY", "tools": [read, _ADD]}


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
    async with serving(notes_mcp_url, notes_redis, _manifest(url), "notes") as (_admin, agent_key):
        async with agent(notes_mcp_url, agent_key) as client:
            result = await client.call_tool("notes_list", {})
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
    async with serving(notes_mcp_url, notes_redis, _manifest(url), "notes") as (_admin, agent_key):
        async with agent(notes_mcp_url, agent_key) as client:
            result = await client.call_tool("notes_list", {})
    assert error_code(result) == "CONFLICT"
    assert CANARY not in everything_the_model_sees(result)
    calls = [e for e in await RedisStreamAuditSink(notes_redis).recent(50) if e.action == "tool.call"]
    assert any(f"taken_{CANARY}" in e.reason for e in calls)


async def _review_read_and_propose(
    mcp_url: str, redis: Redis, backend: PlantedBackend, manifest: dict[str, Any]
) -> tuple[dict[str, Any], CallToolResult, bool]:
    """With hostile text planted in every string, register and accept `manifest`: what the review shows, what
    `notes_list` answers, and whether the `notes_add` card proposed next is tainted."""
    backend.plant(
        {
            "summary": _hostile(10),
            "notes": [{"id": "n1", "body": _hostile(11), "tags": [_hostile(12)], "author": {"name": _hostile(13)}}],
        }
    )
    async with serving(mcp_url, redis, manifest, "notes") as (admin, agent_key):
        seen = await review(mcp_url, admin, "notes")
        async with agent(mcp_url, agent_key) as client:
            result = await client.call_tool("notes_list", {})
            receipt = payload(await client.call_tool("notes_add", {"text": "a note"}))
    card = await RedisLedger(redis).get(receipt["card_id"])
    assert card is not None and card.provenance is not None
    return seen, result, card.provenance.tainted


async def test_unmarked_strings_never_reach_the_model_and_do_not_taint(
    notes_redis: Redis, notes_mcp_url: str, planted_backend: tuple[str, PlantedBackend]
) -> None:
    """A manifest that marks nothing: every plain string (the summary, bodies, tags, names) is withheld, the
    patterned ids come through, and the card proposed after the read is not tainted. The review says so."""
    url, backend = planted_backend
    seen, result, tainted = await _review_read_and_propose(
        notes_mcp_url, notes_redis, backend, _manifest(url, marked=[])
    )
    assert not result.is_error
    assert CANARY not in everything_the_model_sees(result)
    assert payload(result)["summary"] == WITHHELD and payload(result)["notes"][0]["id"] == "n1"
    assert not tainted
    assert seen["model_sees"]["notes_list"]["notes[].id"] == "trusted: pattern"
    assert seen["model_sees"]["notes_list"]["notes[].body"] == "withheld"


async def test_a_field_shown_as_untrusted_reaches_the_model_fenced_and_taints_the_next_card(
    notes_redis: Redis, notes_mcp_url: str, planted_backend: tuple[str, PlantedBackend]
) -> None:
    """``shown_untrusted_fields: ["notes[].body"]``: the body reaches the model inside the fence and nothing
    else planted does; the card proposed after the read is tainted, and the review names the field."""
    url, backend = planted_backend
    manifest = _manifest(url, marked=[], shown=["notes[].body"])
    seen, result, tainted = await _review_read_and_propose(notes_mcp_url, notes_redis, backend, manifest)
    body = payload(result)["notes"][0]["body"]
    assert body == fence(_hostile(11)) and body.startswith(FENCE_OPEN)
    assert everything_the_model_sees(result).count(CANARY) == everything_the_model_sees(result).count(_hostile(11))
    assert tainted
    assert seen["model_sees"]["notes_list"]["notes[].body"] == "shown fenced as untrusted"
