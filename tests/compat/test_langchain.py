"""langchain-mcp-adapters 0.3.2 with a LangGraph 1.2 ReAct agent and langchain's scripted chat model."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from tests.support.compat_flow import framework_python, run_scenario

pytestmark = pytest.mark.anyio


async def test_langchain_lists_reads_proposes_follows_the_card_and_shows_a_refusal(redis: Redis, mcp_url: str) -> None:
    """The adapters open a session per call (MCP SDK 1.x, 2025-11-25): the receipt, the outcome, the refusal."""
    python = framework_python("langchain")
    seen = await run_scenario(redis, mcp_url, python, "langchain_agent.py", day="2027-06-03")
    print(seen["refusal"])
