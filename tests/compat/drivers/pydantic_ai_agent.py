"""pydantic-ai with its own scripted model (`FunctionModel`), through `MCPToolset` over Streamable HTTP.

Run in the framework's own environment (`tests.support.compat_envs`) as ``python pydantic_ai_agent.py``,
one spec a line on stdin (``{"url": ..., "token": ..., "calls": [[name, arguments], ...]}``). The model
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


class Scripted:
    """A `FunctionModel` that calls `calls` in order, one per turn, then answers "done"; it keeps the tool
    names it was offered and, per call, the text the framework showed it."""

    def __init__(self, calls: list[list[Any]]) -> None:
        self.calls = calls
        self.offered: list[str] = []
        self.seen: list[str] = []
        self.model = FunctionModel(self._turn)

    def _turn(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not self.offered:
            self.offered.extend(tool.name for tool in info.function_tools)
        last = messages[-1]
        if isinstance(last, ModelRequest):
            self.seen.extend(_seen(p) for p in last.parts if p.part_kind in ("tool-return", "retry-prompt"))
        if len(self.seen) < len(self.calls):
            name, arguments = self.calls[len(self.seen)]
            return ModelResponse(parts=[ToolCallPart(tool_name=name, args=arguments)])
        return ModelResponse(parts=[TextPart("done")])


def scripted(calls: list[list[Any]]) -> tuple[Any, Scripted]:
    """The model to hand the framework, and what records the run (`tests/compat/drivers/readme_example.py`)."""
    recorder = Scripted(calls)
    return recorder.model, recorder


async def main(spec: dict[str, Any]) -> dict[str, Any]:
    calls: list[list[Any]] = spec["calls"]
    model, recorder = scripted(calls)
    toolset = MCPToolset(spec["url"], headers={"Authorization": f"Bearer {spec['token']}"},
                         prefer_tasks=spec.get("prefer_tasks", True))  # fmt: skip
    agent = Agent(model, toolsets=[toolset], retries=len(calls) + 1)
    async with agent:
        await agent.run("Book room-eos.")
    return {"tools": recorder.offered, "seen": recorder.seen}


if __name__ == "__main__":  # one spec a line, one answer a line: the framework is imported once for them all
    for line in sys.stdin:
        print(json.dumps(asyncio.run(main(json.loads(line)))), flush=True)
