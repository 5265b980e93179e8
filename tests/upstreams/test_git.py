"""The reference git MCP server (PyPI, pinned) fronted over stdio on a repository the test owns: git_log is a
read, git_commit a card that makes exactly one commit once approved."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from gateway.cards.card import CardState
from gateway.config.upstreams import LookupRule, ToolReview, UpstreamSection
from gateway.runtime.app import Gateway
from gateway.runtime.worker import Worker
from gateway.store.keys import KeyStore
from gateway.upstreams.connection import UpstreamConnection
from gateway.upstreams.review import definition_hash
from gateway.upstreams.tools import upstream_tools
from tests.support.agents import make_key
from tests.support.cards import approve
from tests.support.mcp_servers import fronting_settings
from tests.support.services import in_process_gateway

pytestmark = pytest.mark.anyio


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
async def fronted(
    git_server: Path, tmp_path: Path, redis: Redis, redis_url: str
) -> AsyncIterator[tuple[Gateway, Path]]:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.name", "Countersign Test")
    _git(repo, "config", "user.email", "test@countersign.example")
    (repo / "README").write_text("first\n")
    _git(repo, "add", "README")
    _git(repo, "commit", "-q", "-m", "first commit")
    (repo / "README").write_text("second\n")
    _git(repo, "add", "README")  # staged by someone with a shell; the agent only proposes the commit
    stdio = UpstreamSection(transport="stdio", command=str(git_server), args=["--repository", str(repo)])
    probe = UpstreamConnection("git", stdio, secrets={})
    async with probe.running():
        listing = {tool["name"]: tool for tool in await probe.list_tools()}
        assert probe.protocol_version == "2026-07-28"  # this server (on the Python SDK 2.x) speaks the stateless era
    logged = LookupRule(tool="git_log", arguments={"repo_path": "repo_path"}, contains="message")
    reviews = {
        "git_log": ToolReview(mode="read", definition=definition_hash(listing["git_log"]), roles=["staff"]),
        "git_commit": ToolReview(
            mode="write", definition=definition_hash(listing["git_commit"]), roles=["staff"], lookup=logged
        ),
    }
    section = stdio.model_copy(update={"tools": reviews})
    connection = UpstreamConnection("git", section, secrets={})
    settings = fronting_settings(redis_url, "git", section, roles=("staff", "approver"))
    async with connection.running():
        tools, _held = upstream_tools("git", list(listing.values()), reviews, connection, taken=frozenset())
        assert sorted(tool.name for tool in tools) == ["git_git_commit", "git_git_log"]
        async with in_process_gateway(settings, tools) as gateway:
            yield gateway, repo


async def test_git_commit_is_a_card_and_approved_makes_exactly_one_commit(
    fronted: tuple[Gateway, Path], redis: Redis
) -> None:
    """git_log reads (third-party text: withheld from the model); git_commit files a card; approved, one commit."""
    gateway, repo = fronted
    staff = await KeyStore(redis).resolve(await make_key(redis, roles=("staff",)))
    assert staff is not None
    log = await gateway.executor.agent.execute(staff, "git_git_log", {"repo_path": str(repo)})
    assert log.code is None and log.untrusted and "first commit" in log.for_human()
    assert "first commit" not in str(log.for_model())
    arguments = {"repo_path": str(repo), "message": "Second: approved by a person"}
    card_id = (await gateway.executor.agent.execute(staff, "git_git_commit", arguments)).for_model()["card_id"]
    assert _git(repo, "rev-list", "--count", "HEAD").strip() == "1"  # a card, not a commit
    await approve(gateway.ledger, card_id)
    worker = Worker(gateway.executor.writes, gateway.ledger, block_ms=50)
    await gateway.ledger.ensure_outbox_group()
    with anyio.fail_after(20):
        while (card := await gateway.ledger.get(card_id)) is not None and card.state is CardState.APPROVED:
            await worker.consume_once()
    assert card is not None and card.state is CardState.SUCCEEDED
    assert _git(repo, "rev-list", "--count", "HEAD").strip() == "2"
    assert _git(repo, "log", "-1", "--format=%s").strip() == "Second: approved by a person"
    tool = gateway.live.current()["git_git_commit"]
    assert tool.write_contract is not None
    ctx = gateway.executor.writes._invoker.context(tool, staff)
    from dataclasses import replace

    found = await tool.write_contract.status_lookup("key", replace(ctx, approved_arguments=arguments))
    assert found.state == "applied"  # the lookup a lost answer would be settled by finds the commit in git_log
