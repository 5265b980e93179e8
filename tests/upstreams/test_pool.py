"""A pool of sessions toward an HTTP upstream: concurrent calls spread over several sessions, and a session the
server ends is replaced while the call that found out is made again on another one (it never went out). The
pinned mcp-server-git over Streamable HTTP in the 2025-11-25 era, whose sessions the server names and can end."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest
from mcp.types import CallToolResult

from gateway.config.upstreams import DEFAULT_SESSIONS, UpstreamSection
from gateway.errors import UpstreamTimeoutError
from gateway.telemetry.metrics import REGISTRY
from gateway.upstreams.connection import UpstreamConnection
from tests.support.mcp_servers import changing_over_http, git_over_http
from tests.support.redis_server import free_port

pytestmark = pytest.mark.anyio


async def _open(connection: UpstreamConnection, sessions: int) -> None:
    with anyio.fail_after(30):
        while connection.open_sessions < sessions:
            await anyio.sleep(0.05)


def _metric(name: str) -> float:
    return REGISTRY.get_sample_value(name, {"upstream": "git"}) or 0.0


def _sessions(log: Path) -> set[str]:
    """The session ids the server saw requests for."""
    return set(log.read_text().split()) - {"-"} if log.exists() else set()


async def _reads(connection: UpstreamConnection, repo: Path, count: int) -> list[CallToolResult]:
    """`count` git_log calls started together, their results in order."""
    results: list[CallToolResult | None] = [None] * count

    async def read(index: int) -> None:
        results[index] = await connection.call_tool("git_log", {"repo_path": str(repo)}, timeout=10)

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(read, index)
    return [result for result in results if result is not None]


def test_an_http_upstream_keeps_several_sessions_and_a_stdio_one_exactly_one() -> None:
    """Unset, an HTTP upstream gets the default pool and a stdio one a single session; a stdio pool is refused."""
    assert UpstreamSection(transport="http", url="http://127.0.0.1:1/mcp").pool_size == DEFAULT_SESSIONS > 1
    assert UpstreamSection(transport="stdio", command="server").pool_size == 1
    with pytest.raises(ValueError, match="one session"):
        UpstreamSection(transport="stdio", command="server", sessions=2)


async def test_concurrent_reads_spread_over_the_pools_sessions(git_server: Path, repo: Path, tmp_path: Path) -> None:
    """Six reads started together go out on the three sessions two by two, each session known to the server."""
    sessions = tmp_path / "sessions.log"
    async with git_over_http(git_server, repo, free_port(), tmp_path / "auth.log", sessions) as url:
        section = UpstreamSection(transport="http", url=url, protocol="legacy", sessions=3)
        async with UpstreamConnection("git", section, secrets={}).running() as connection:
            await _open(connection, 3)
            results = await _reads(connection, repo, 6)
            assert len(results) == 6 and not any(result.is_error for result in results)
            assert sorted(connection.calls_by_session) == [2, 2, 2]
    assert len(_sessions(sessions)) == 3


async def test_a_session_the_server_ends_is_replaced_and_the_call_made_on_another(
    git_server: Path, repo: Path, tmp_path: Path
) -> None:
    """The server ends one of the pool's sessions (DELETE, as a client may): of three reads started together, the
    one sent on it is refused by the server before anything ran, made again on another session, and answers;
    the pool opens a fourth session in place of the ended one."""
    sessions = tmp_path / "sessions.log"
    async with git_over_http(git_server, repo, free_port(), tmp_path / "auth.log", sessions) as url:
        section = UpstreamSection(transport="http", url=url, protocol="legacy", sessions=3)
        async with UpstreamConnection("git", section, secrets={}).running() as connection:
            await _open(connection, 3)
            with anyio.fail_after(10):  # each session's first request after the handshake names it
                while len(known := _sessions(sessions)) < 3:
                    await anyio.sleep(0.05)
            ended = sorted(known)[0]
            headers = {"mcp-session-id": ended, "mcp-protocol-version": "2025-11-25"}
            async with httpx.AsyncClient(timeout=10) as http:
                assert (await http.delete(url, headers=headers)).status_code == 200
            again_before = _metric("countersign_upstream_calls_made_again_total")
            results = await _reads(connection, repo, 3)
            assert len(results) == 3 and not any(result.is_error for result in results)
            assert sum(connection.calls_by_session) == 4  # three reads, one of them made twice
            assert _metric("countersign_upstream_calls_made_again_total") == again_before + 1
            with anyio.fail_after(30):
                while connection.connects < 4 or connection.open_sessions < 3:
                    await anyio.sleep(0.05)
            assert _metric("countersign_upstream_sessions_open") == 3


async def test_a_call_that_went_out_is_never_made_again_on_another_session(tmp_path: Path) -> None:
    """A call the upstream received but did not answer in time is a timeout (it may have landed), raised as such:
    the pool does not make it again on another session, so the server ran it once."""
    async with changing_over_http(free_port(), tmp_path / "server.log") as url:
        section = UpstreamSection(transport="http", url=url, protocol="legacy", sessions=2)
        async with UpstreamConnection("notes", section, secrets={}).running() as connection:
            await _open(connection, 2)
            with pytest.raises(UpstreamTimeoutError) as raised:
                await connection.call_tool("slow", {}, timeout=0.5)
            assert raised.value.sent is True
            async with httpx.AsyncClient(timeout=10) as http:
                assert (await http.get(url.removesuffix("/mcp") + "/calls")).json() == {"slow": 1}
            assert sum(connection.calls_by_session) == 1


@pytest.mark.slow  # a call of five seconds, and six quiet seconds on a session's standing stream
async def test_a_call_longer_than_five_seconds_answers_and_a_quiet_stream_keeps_its_session(tmp_path: Path) -> None:
    """A call its review gives ten seconds takes five and answers, on the same session; a 2025-11-25 session whose
    standing stream has been quiet for six seconds is still the one that carries the next call. (The sessions'
    HTTP client once kept httpx's default of five seconds for every read: the call broke its session as lost.)"""
    async with changing_over_http(free_port(), tmp_path / "server.log") as url:
        section = UpstreamSection(transport="http", url=url, protocol="legacy", sessions=1)
        async with UpstreamConnection("notes", section, secrets={}).running() as connection:
            await _open(connection, 1)
            answered = await connection.call_tool("slow", {}, timeout=10)
            assert [block.text for block in answered.content if block.type == "text"] == ["done"]
            await anyio.sleep(6)
            described = await connection.call_tool("describe", {"topic": "pools"}, timeout=10)
            assert not described.is_error, described
            assert (connection.connects, connection.open_sessions) == (1, 1)
