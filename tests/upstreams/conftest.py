"""The pinned MCP servers the upstream tests front, installed once per session (CI: fail, never skip), and the
database they run on."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.mcp_servers import install_git_server, installed_or_skipped


@pytest.fixture(scope="module", name="redis_url")
def upstreams_database(quiet_redis_url: str) -> str:
    """A database no other gateway's worker drains: the cards these tests make are run by their own gateway's
    worker, or by the test itself."""
    return quiet_redis_url


@pytest.fixture(scope="session")
def git_server() -> Path:
    return installed_or_skipped("mcp-server-git", install_git_server)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit, for mcp-server-git to read."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (
        ["init", "-q"],
        ["config", "user.name", "Countersign Test"],
        ["config", "user.email", "test@countersign.example"],
        ["commit", "-q", "--allow-empty", "-m", "first commit"],
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    return repo
