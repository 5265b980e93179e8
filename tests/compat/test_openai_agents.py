"""The OpenAI Agents SDK 0.24 (`MCPServerStreamableHttp`) with a scripted `Model`."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from tests.support.compat_flow import framework_python, run_scenario

pytestmark = pytest.mark.anyio


async def test_openai_agents_lists_reads_proposes_follows_the_card_and_shows_a_refusal(
    redis: Redis, mcp_url: str
) -> None:
    """The SDK's default failure handling: the refusal reaches the model as the tool's text, sentence first."""
    python = framework_python("openai_agents")
    seen = await run_scenario(redis, mcp_url, python, "openai_agents_agent.py", day="2027-06-02")
    print(seen["refusal"])
