"""The FastMCP 4 client, as an agent loop built on it calls tools (it has no model of its own).

Run in the framework's own environment (`tests.support.compat_envs`) as ``python fastmcp_client.py``,
one spec a line on stdin (``{"url": ..., "token": ..., "calls": [[name, arguments], ...]}``). It lists
the tools, calls each in order with the client's defaults (``raise_on_error=True``: a refusal is a
``ToolError``), and prints ``{"tools": [...], "seen": [...], "era": ...}``: per call, the result's text,
or the error's message, which is what a loop built on this client hands its model.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from fastmcp import Client
from fastmcp.exceptions import ToolError


async def main(spec: dict[str, Any]) -> dict[str, Any]:
    seen: list[str] = []
    async with Client(spec["url"], auth=spec["token"]) as client:
        tools = [tool.name for tool in await client.list_tools()]
        for name, arguments in spec["calls"]:
            try:
                result = await client.call_tool(name, arguments)
            except ToolError as error:
                seen.append(str(error))
                continue
            seen.append("".join(getattr(block, "text", "") for block in result.content))
    return {"tools": tools, "seen": seen}


if __name__ == "__main__":  # one spec a line, one answer a line: the framework is imported once for them all
    for line in sys.stdin:
        print(json.dumps(asyncio.run(main(json.loads(line)))), flush=True)
