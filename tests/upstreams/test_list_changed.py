"""An upstream that redefines a reviewed tool while connected, and says so only with
``notifications/tools/list_changed``: the gateway reads the list again on the notice (no poll due, no new session),
quarantines the changed tool, and the review shows the diff. The server is the MCP SDK's own, run as a process
(`tests.support.changing_server`)."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest
from redis.asyncio import Redis

from gateway.config.upstreams import ToolReview, UpstreamSection
from gateway.principal import KeyKind
from gateway.runtime.upstreams import fronting
from gateway.store.keys import KeyStore
from gateway.upstreams.connection import UpstreamConnection
from gateway.upstreams.review import definition_hash
from tests.support.agents import make_key
from tests.support.mcp_servers import changing_over_http, fronting_settings
from tests.support.redis_server import free_port
from tests.support.services import in_process_gateway

pytestmark = pytest.mark.anyio


async def test_a_definition_changed_upstream_is_quarantined_on_its_list_changed_notice(
    tmp_path: Path, redis: Redis, redis_url: str
) -> None:
    """describe is reviewed and served; the server redefines it and notifies. With the poll an hour away and no
    session opened anew, the gateway stops serving it, and the review shows it changed, with the diff."""
    port = free_port()
    async with changing_over_http(port, tmp_path / "server.log") as url:
        section = UpstreamSection(transport="http", url=url, protocol="legacy", sessions=2)
        async with UpstreamConnection("notes", section, secrets={}).running() as probe:
            listed = next(tool for tool in await probe.list_tools() if tool["name"] == "describe")
        review = ToolReview(mode="read", definition=definition_hash(listed), public=True)
        section = section.model_copy(update={"tools": {"describe": review}})
        settings = fronting_settings(redis_url, "notes", section)
        admin = await KeyStore(redis).resolve(
            await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))
        )
        assert admin is not None
        async with in_process_gateway(settings, []) as gateway:
            async with fronting(
                settings.upstreams, gateway.live, reviews=gateway.upstream_reviews, secrets={}, poll_seconds=3600
            ) as connections:
                assert "notes_describe" in gateway.live.current()
                connection = connections["notes"]
                with anyio.fail_after(20):
                    while connection.open_sessions < 2:
                        await anyio.sleep(0.05)
                opened = connection.connects
                async with httpx.AsyncClient(timeout=10) as http:
                    changed = (await http.post(url.removesuffix("/mcp") + "/change")).json()
                assert changed["told"] >= 1
                with anyio.fail_after(20):
                    while "notes_describe" in gateway.live.current():
                        await anyio.sleep(0.05)
                assert connection.connects == opened and connection.list_changes >= 1
                shown = await gateway.upstream_reviews.show(admin, "notes")
                assert shown.entry is not None
                tool = next(tool for tool in shown.entry.tools if tool.name == "describe")
                assert (tool.state, tool.reason) == ("quarantined", "changed")
                assert '-  "description": "Describes the notes, version 1",' in tool.diff
                assert '+  "description": "Describes the notes, version 2",' in tool.diff
