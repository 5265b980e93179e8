"""pydantic-ai with its own scripted model (`FunctionModel`), through `MCPToolset` over Streamable HTTP.

Run in the framework's own environment (`tests.support.compat_envs`) as
``python pydantic_ai_agent.py '{"url": ..., "token": ..., "calls": [[name, arguments], ...]}'``. The model
calls the tools in order, one per turn, and prints ``{"tools": [...], "seen": [...]}``: the tool names
the model was offered and, per call, the text the framework put in front of the model.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


def _seen(part: Any) -> str:
    return str(part.model_response_str() if hasattr(part, "model_response_str") else part.content)


async def main(spec: dict[str, Any]) -> dict[str, Any]:
    calls: list[list[Any]] = spec["calls"]
    offered: list[str] = []
    seen: list[str] = []

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not offered:
            offered.extend(tool.name for tool in info.function_tools)
        last = messages[-1]
        if isinstance(last, ModelRequest):
            seen.extend(_seen(p) for p in last.parts if p.part_kind in ("tool-return", "retry-prompt"))
        if len(seen) < len(calls):
            name, arguments = calls[len(seen)]
            return ModelResponse(parts=[ToolCallPart(tool_name=name, args=arguments)])
        return ModelResponse(parts=[TextPart("done")])

    toolset = MCPToolset(spec["url"], headers={"Authorization": f"Bearer {spec['token']}"},
                         prefer_tasks=spec.get("prefer_tasks", True))  # fmt: skip
    agent = Agent(FunctionModel(scripted), toolsets=[toolset], retries=len(calls) + 1)
    async with agent:
        await agent.run("Book room-eos.")
    return {"tools": offered, "seen": seen}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
