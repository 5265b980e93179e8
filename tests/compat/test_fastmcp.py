"""The FastMCP 4.2 client, with its defaults (``raise_on_error=True``)."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from tests.support.compat_flow import framework_python, run_scenario

pytestmark = pytest.mark.anyio


async def test_the_fastmcp_client_lists_reads_proposes_follows_the_card_and_shows_a_refusal(
    redis: Redis, mcp_url: str
) -> None:
    """Without ``fastmcp-tasks`` it declares no tasks: the receipt at once; a refusal is a ToolError whose
    message opens with the sentence."""
    python = framework_python("fastmcp")
    seen = await run_scenario(redis, mcp_url, python, "fastmcp_client.py", day="2027-06-04")
    assert seen["refusal"].startswith("No such object is visible to you."), seen["refusal"]
    print(seen["refusal"])
