"""Registered tools end to end: a path placeholder's value never changes which endpoint is called."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from redis.asyncio import Redis

from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.agents import agent, error_code
from tests.support.planted import PlantedBackend, notes_detail_tool
from tests.support.registration import serving

pytestmark = pytest.mark.anyio


def _manifest(base_url: str) -> dict[str, Any]:
    read = notes_detail_tool()
    write = {
        **read,
        "name": "notes_archive",
        "description": "Archive one note.",
        "mode": "write",
        "method": "POST",
        "path": "/notes/{note_id}/archive",
        "approval": {"approver_role": "approver"},
        "write_contract": {
            "dedupes_on_key": True,
            "key_retention_seconds": 60,
            "status_path": "/idempotency/{key}",
            "reference_field": "note_id",
        },  # fmt: skip
        "summary_template": "Archive note {note_id}",
    }
    return {"base_url": base_url, "signing_secret_env": "NOTES_SIGNING_KEY", "tools": [read, write]}


@pytest.mark.parametrize("value", ["..", ".", "%2e%2e", "a/../b"])
async def test_a_dot_segment_is_an_audited_validation_error_and_nothing_is_sent_or_proposed(
    notes_redis: Redis, notes_mcp_url: str, planted_backend: tuple[str, PlantedBackend], value: str
) -> None:
    """The read is refused before it runs and the write before it becomes a card; both are audited."""
    url, backend = planted_backend
    backend.plant({"note_id": "n1"})
    async with serving(notes_mcp_url, notes_redis, _manifest(url), "notes") as (_admin, agent_key):
        backend.forget()
        async with agent(notes_mcp_url, agent_key) as client:
            read = await client.call_tool("notes_detail", {"note_id": value})
            write = await client.call_tool("notes_archive", {"note_id": value})
    assert error_code(read) == error_code(write) == "VALIDATION_ERROR"
    assert backend.raw_paths == []
    assert await RedisLedger(notes_redis).recent() == []
    refused = {e.tool for e in await RedisStreamAuditSink(notes_redis).recent(50) if e.code == "VALIDATION_ERROR"}
    assert refused == {"notes_detail", "notes_archive"}


async def test_an_ordinary_value_arrives_as_one_segment_of_the_templates_path(
    notes_redis: Redis, notes_mcp_url: str, planted_backend: tuple[str, PlantedBackend]
) -> None:
    """A value with a slash and dots in it is one encoded segment on the wire, at the template's endpoint."""
    url, backend = planted_backend
    backend.plant({"note_id": "n1"})
    async with serving(notes_mcp_url, notes_redis, _manifest(url), "notes") as (_admin, agent_key):
        backend.forget()
        async with agent(notes_mcp_url, agent_key) as client:
            assert not (await client.call_tool("notes_detail", {"note_id": "a/..b"})).is_error
    assert backend.raw_paths == [f"/notes/{quote('a/..b', safe='')}/detail".encode()]
