"""The OpenAI Agents SDK with a scripted `Model`, through `MCPServerStreamableHttp`.

Run in the framework's own environment (`tests.support.compat_envs`) as ``python openai_agents_agent.py``,
one spec a line on stdin (``{"url": ..., "token": ..., "calls": [[name, arguments], ...]}``). The
model calls the tools in order, one per turn, and prints ``{"tools": [...], "seen": [...]}``: the tool
names the model was offered and, per call, the ``function_call_output`` the framework gave the model.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agents import Agent, Runner
from agents.items import ModelResponse
from agents.mcp import MCPServerStreamableHttp
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText


class Scripted(Model):
    """Calls `calls` in order, one per turn, then answers "done"; keeps what each tool call returned."""

    def __init__(self, calls: list[list[Any]]) -> None:
        self.calls = calls
        self.offered: list[str] = []
        self.seen: list[str] = []

    async def get_response(self, *args: Any, input: Any, tools: Any, **kwargs: Any) -> ModelResponse:
        if not self.offered:
            self.offered.extend(tool.name for tool in tools)
        items = input if isinstance(input, list) else []
        self.seen = [str(item["output"]) for item in items if isinstance(item, dict)
                     and item.get("type") == "function_call_output"]  # fmt: skip
        if len(self.seen) < len(self.calls):
            name, arguments = self.calls[len(self.seen)]
            call = ResponseFunctionToolCall(type="function_call", call_id=f"call_{len(self.seen)}", name=name,
                                            arguments=json.dumps(arguments), id=f"fc_{len(self.seen)}")  # fmt: skip
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(type="output_text", text="done", annotations=[])
        message = ResponseOutputMessage(type="message", id="msg", role="assistant", status="completed", content=[text])
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model answers whole responses only")


def scripted(calls: list[list[Any]]) -> tuple[Any, Scripted]:
    """The model to hand the framework, and what records the run (`tests/compat/drivers/readme_example.py`)."""
    model = Scripted(calls)
    return model, model


async def main(spec: dict[str, Any]) -> dict[str, Any]:
    model = Scripted(spec["calls"])
    params = {"url": spec["url"], "headers": {"Authorization": f"Bearer {spec['token']}"}, "timeout": 30}
    async with MCPServerStreamableHttp(params, name="countersign", client_session_timeout_seconds=30) as server:
        agent = Agent(name="booker", instructions="Book rooms.", model=model, mcp_servers=[server])
        await Runner.run(agent, "Book room-eos.", max_turns=len(spec["calls"]) + 2)
    return {"tools": model.offered, "seen": model.seen}


if __name__ == "__main__":  # one spec a line, one answer a line: the framework is imported once for them all
    for line in sys.stdin:
        print(json.dumps(asyncio.run(main(json.loads(line)))), flush=True)
