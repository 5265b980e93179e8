"""The reference "everything" MCP server (npm, pinned) fronted over Streamable HTTP: a reviewed read answers in
both protocol modes, and an upgrade upstream that changes a reviewed tool quarantines it, with the diff logged."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from gateway.config.settings import Settings
from gateway.config.upstreams import ToolReview, UpstreamSection
from gateway.principal import KeyKind
from gateway.runtime.upstreams import fronting
from gateway.store.keys import KeyStore
from gateway.untrusted import WITHHELD
from gateway.upstreams.connection import UpstreamConnection
from gateway.upstreams.review import definition_hash
from tests.support.agents import make_key
from tests.support.mcp_servers import (
    EVERYTHING_EARLIER_VERSION,
    EVERYTHING_VERSION,
    NodeServer,
    fronting_settings,
    install_everything_servers,
    installed_or_skipped,
    serving_over_http,
)
from tests.support.redis_server import free_port
from tests.support.services import in_process_gateway

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def servers() -> dict[str, NodeServer]:
    return installed_or_skipped("the everything MCP server", install_everything_servers)


def _settings(redis_url: str, section: UpstreamSection) -> Settings:
    return fronting_settings(redis_url, "every", section)


async def _listed_echo(url: str, protocol: str) -> dict[str, object]:
    probe = UpstreamConnection("every", UpstreamSection(transport="http", url=url, protocol=protocol), secrets={})  # type: ignore[arg-type]
    async with probe.running():
        return next(tool for tool in await probe.list_tools() if tool["name"] == "echo")


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_a_reviewed_read_answers_over_streamable_http_in_either_mode(
    servers: dict[str, NodeServer], tmp_path: Path, redis: Redis, redis_url: str, protocol: str
) -> None:
    """echo, reviewed read: the agent's call reaches the server; its text is third-party (withheld from the model)."""
    async with serving_over_http(servers[EVERYTHING_VERSION], free_port(), tmp_path / "server.log") as url:
        echo = await _listed_echo(url, protocol)
        review = ToolReview(mode="read", definition=definition_hash(echo), public=True)
        section = UpstreamSection(transport="http", url=url, protocol=protocol, tools={"echo": review})  # type: ignore[arg-type]
        settings = _settings(redis_url, section)
        async with in_process_gateway(settings, []) as gateway:
            async with fronting(
                settings.upstreams, gateway.live, reviews=gateway.upstream_reviews, secrets={}, poll_seconds=60
            ) as connections:
                # This server speaks the handshake era only: "auto" tries 2026-07-28 and settles on it.
                assert connections["every"].protocol_version == "2025-11-25"
                staff = await KeyStore(redis).resolve(await make_key(redis, roles=("staff",)))
                assert staff is not None
                said = await gateway.executor.agent.execute(staff, "every_echo", {"message": "hello upstream"})
                assert said.code is None and said.for_model() == {"text": WITHHELD}
                assert "hello upstream" in said.for_human()
                unreviewed = await gateway.executor.agent.execute(staff, "every_get-sum", {"a": 1, "b": 2})
                assert unreviewed.code is not None  # listed upstream, never reviewed: not served


async def test_an_upgrade_that_changes_a_reviewed_tool_quarantines_it_and_logs_the_diff(
    servers: dict[str, NodeServer], tmp_path: Path, redis: Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """echo was reviewed as the earlier version defines it; the upstream is upgraded in place (same URL) to a
    version that defines it differently: from the next reading the tool is held back, the review shows the diff and
    the diff is logged; a registry admin accepts the new definition and it is served again."""
    caplog.set_level(logging.WARNING, logger="gateway.runtime.upstreams")
    port = free_port()
    async with serving_over_http(servers[EVERYTHING_EARLIER_VERSION], port, tmp_path / "earlier.log") as url:
        echo = await _listed_echo(url, "legacy")
    review = ToolReview(mode="read", definition=definition_hash(echo), public=True)
    section = UpstreamSection(transport="http", url=url, protocol="legacy", tools={"echo": review})
    settings = _settings(redis_url, section)
    staff = await KeyStore(redis).resolve(await make_key(redis, roles=("staff",)))
    registry_admin = await KeyStore(redis).resolve(
        await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))
    )
    assert staff is not None and registry_admin is not None
    async with in_process_gateway(settings, []) as gateway, contextlib.AsyncExitStack() as earlier:
        earlier_server = servers[EVERYTHING_EARLIER_VERSION]
        await earlier.enter_async_context(serving_over_http(earlier_server, port, tmp_path / "1.log"))
        async with fronting(
            settings.upstreams, gateway.live, reviews=gateway.upstream_reviews, secrets={}, poll_seconds=0.2
        ):
            assert "every_echo" in gateway.live.current()
            assert (await gateway.executor.agent.execute(staff, "every_echo", {"message": "before"})).code is None
            # The upgrade: the earlier server stops, and the same address serves a version whose echo differs.
            await earlier.aclose()
            async with serving_over_http(servers[EVERYTHING_VERSION], port, tmp_path / "2.log"):
                with anyio.fail_after(30):
                    while "every_echo" in gateway.live.current():
                        await anyio.sleep(0.1)
                refused = await gateway.executor.agent.execute(staff, "every_echo", {"message": "after"})
                assert refused.code is not None
                # The review shows the changed tool with the diff from the definition served, and the new tools
                # as unreviewed; a registry admin accepts echo as listed now, and it is served again.
                shown = await gateway.upstream_reviews.show(registry_admin, "every")
                assert shown.entry is not None
                tools = {tool.name: tool for tool in shown.entry.tools}
                assert (tools["echo"].state, tools["echo"].reason) == ("quarantined", "changed")
                assert '-  "description": "Echoes back the input",' in tools["echo"].diff
                assert '+  "description": "Echoes back the input string",' in tools["echo"].diff
                assert tools["get-sum"].reason == "unreviewed" and tools["get-sum"].diff == []
                again = review.model_copy(update={"definition": tools["echo"].listed_hash}).model_dump(mode="json")
                accepted = await gateway.upstream_reviews.accept(registry_admin, "every", "echo", again)
                assert accepted.ok, accepted
                with anyio.fail_after(30):
                    while "every_echo" not in gateway.live.current():
                        await anyio.sleep(0.1)
                assert (await gateway.executor.agent.execute(staff, "every_echo", {"message": "again"})).code is None
    diffs = [r.getMessage() for r in caplog.records if "tool echo changed" in r.getMessage()]
    assert diffs and '-  "description": "Echoes back the input",' in diffs[0]
    assert '+  "description": "Echoes back the input string",' in diffs[0]


async def test_a_tools_list_changed_from_the_upstream_is_heard_and_the_list_read_after_it_is_recorded(
    servers: dict[str, NodeServer], redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Over stdio the server announces its tool list changed once it registered the tools that depend on the
    client's capabilities: the gateway hears the notice and reads the list after it (with the poll an hour away),
    and the review records that list, the late tools included."""
    caplog.set_level(logging.DEBUG, logger="gateway")
    server = servers[EVERYTHING_VERSION]
    section = UpstreamSection(transport="stdio", command=str(server.node), args=[str(server.entry), "stdio"])
    settings = _settings(redis_url, section)
    async with in_process_gateway(settings, []) as gateway:
        async with fronting(
            settings.upstreams, gateway.live, reviews=gateway.upstream_reviews, secrets={}, poll_seconds=3600
        ) as connections:

            def said() -> list[str]:
                lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("upstream every: ")]
                return [line for line in lines if "tools/list_changed" in line or "tool list read" in line]

            with anyio.fail_after(20):
                while "upstream every: tools/list_changed" not in said() or "tool list read" not in said()[-1]:
                    await anyio.sleep(0.05)
            assert connections["every"].list_changes >= 1
            listing = await gateway.upstream_reviews.store.listing("every")
            assert listing is not None and "simulate-research-query" in {tool["name"] for tool in listing.tools}
