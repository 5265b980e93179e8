"""The pinned MCP servers the upstream tests front, installed once per session (CI: fail, never skip)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.mcp_servers import install_git_server, installed_or_skipped


@pytest.fixture(scope="session")
def git_server() -> Path:
    return installed_or_skipped("mcp-server-git", install_git_server)
