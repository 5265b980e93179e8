"""langchain-mcp-adapters with a LangGraph ReAct agent and langchain's scripted chat model.

Run in the framework's own environment (`tests.support.compat_envs`) as ``python langchain_agent.py``,
one spec a line on stdin (``{"url": ..., "token": ..., "calls": [[name, arguments], ...]}``). The model
calls the tools in order, one per turn, and prints ``{"tools": [...], "seen": [...]}``: the tool names
the model was offered and, per call, the ``ToolMessage`` content the framework gave the model.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langgraph.prebuilt import create_react_agent


class ScriptedChat(GenericFakeChatModel):
    """langchain's scripted chat model, bindable to tools (the scripted answers already name them); it keeps
    the tool names it was bound to and, per call, the ``ToolMessage`` content it was shown."""

    offered: list[str] = []
    seen: list[str] = []

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        self.offered = [tool.name for tool in tools]
        return self

    def _generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        self.seen = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
        return super()._generate(messages, *args, **kwargs)


def scripted(calls: list[list[Any]]) -> tuple[Any, ScriptedChat]:
    """The model to hand the framework, and what records the run (`tests/compat/drivers/readme_example.py`)."""
    script: list[AIMessage | str] = [
        AIMessage(content="", tool_calls=[{"name": name, "args": arguments, "id": f"call_{n}"}])
        for n, (name, arguments) in enumerate(calls)
    ]
    model = ScriptedChat(messages=iter([*script, AIMessage(content="done")]))
    return model, model


async def main(spec: dict[str, Any]) -> dict[str, Any]:
    connection = {"transport": "streamable_http", "url": spec["url"],
                  "headers": {"Authorization": f"Bearer {spec['token']}"}}  # fmt: skip
    client = MultiServerMCPClient({"countersign": connection})  # type: ignore[dict-item]
    tools = await client.get_tools()
    model, _ = scripted(spec["calls"])
    agent = create_react_agent(model, tools)
    state = await agent.ainvoke({"messages": [("user", "Book room-eos.")]})
    seen = [str(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]
    return {"tools": [tool.name for tool in tools], "seen": seen}


if __name__ == "__main__":  # one spec a line, one answer a line: the framework is imported once for them all
    for line in sys.stdin:
        print(json.dumps(asyncio.run(main(json.loads(line)))), flush=True)
