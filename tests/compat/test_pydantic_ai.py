"""pydantic-ai 2.78 (`MCPToolset` on FastMCP 4) with its own scripted model (`FunctionModel`)."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from tests.support.compat_flow import framework_python, run_scenario

pytestmark = pytest.mark.anyio


async def test_pydantic_ai_lists_reads_proposes_follows_the_card_and_shows_a_refusal(
    redis: Redis, mcp_url: str
) -> None:
    """The default toolset (``prefer_tasks=True``, which FastMCP 4 ignores): the receipt at once, the outcome
    through approvals_status, and a refusal whose sentence the model sees."""
    python = framework_python("pydantic_ai")
    seen = await run_scenario(redis, mcp_url, python, "pydantic_ai_agent.py", day="2027-06-01")
    print(seen["refusal"])
