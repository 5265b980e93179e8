"""An MCP server (the MCP SDK's own, over Streamable HTTP) whose one tool changes its definition on command, for the
upstream tests: the way an upstream redefines a tool while the gateway is connected, announced only by
``notifications/tools/list_changed``.

Run it as a process: ``python -m tests.support.changing_server PORT``. It lists ``describe``, and ``slow``, which
counts its calls and answers after five seconds; a ``POST /change`` gives ``describe`` a new description and tells
every 2025-11-25 session that listed tools (over its standing stream) that the list changed, then answers how many
sessions it told; ``GET /calls`` answers how many times ``slow`` was called. Nothing else about the server is
special.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import mcp_types as types
import uvicorn
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

__all__ = ["build_app"]


def build_app() -> Any:
    """The server's ASGI app: MCP at ``/mcp``, the command at ``/change``."""
    state: dict[str, Any] = {"version": 1, "sessions": {}, "slow": 0}

    def describe() -> types.Tool:
        return types.Tool(
            name="describe",
            description=f"Describes the notes, version {state['version']}",
            input_schema={"type": "object", "properties": {"topic": {"type": "string"}}},
        )

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if ctx.session is not None:
            state["sessions"][id(getattr(ctx.session, "_connection", ctx.session))] = ctx.session
        slow = types.Tool(name="slow", description="Answers after five seconds", input_schema={"type": "object"})
        return types.ListToolsResult(tools=[describe(), slow])

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "slow":
            state["slow"] += 1
            await anyio.sleep(5)
            return types.CallToolResult(content=[types.TextContent(type="text", text="done")])
        text = f"notes on {(params.arguments or {}).get('topic', 'everything')}, version {state['version']}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server: Server[Any] = Server("changing-notes", on_list_tools=list_tools, on_call_tool=call_tool)

    async def change(request: Request) -> JSONResponse:
        state["version"] += 1
        told = 0
        for key, session in list(state["sessions"].items()):
            try:
                await session.send_tool_list_changed()
                told += 1
            except Exception:  # a session that closed since it listed
                state["sessions"].pop(key, None)
        return JSONResponse({"version": state["version"], "told": told})

    async def calls(request: Request) -> JSONResponse:
        return JSONResponse({"slow": state["slow"]})

    routes = [Route("/change", change, methods=["POST"]), Route("/calls", calls)]
    return server.streamable_http_app(custom_starlette_routes=routes)


if __name__ == "__main__":
    # Open event streams get one second when the test stops the server (as in `tests.support.git_over_http`).
    uvicorn.run(build_app(), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", timeout_graceful_shutdown=1)
