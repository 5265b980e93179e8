"""Task-capable MCP clients for end-to-end tests: the SDK's `Client`, in both protocol eras.

* 2026-07-28: the SDK client with a `ClientExtension` for ``io.modelcontextprotocol/tasks``. It
  advertises the extension in every request's capabilities and claims the ``resultType: "task"``
  answer of ``tools/call`` (the SDK's extension mechanism for result shapes it does not know).
* 2025-11-25: the SDK client after the initialize handshake. The SDK validates a ``tools/call``
  answer of that era as a ``CallToolResult``, which a ``CreateTaskResult`` is not, so the
  task-augmented call goes through the session's own dispatcher (same transport, same session)
  and its answer is read raw.

``tasks/*`` go through `ClientSession.send_request`, which sends the methods it has no schema for
as given and returns their result unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from pydantic import ConfigDict, TypeAdapter

from gateway.mcp.tasks import TASKS_EXTENSION
from tests.support.agents import LEGACY, MODERN

__all__ = ["TaskAgent", "task_agent"]

_ANY: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
TERMINAL = ("completed", "failed", "cancelled")


class CreatedTask(types.Result):
    """A ``CreateTaskResult`` of the tasks extension: flat task fields beside ``resultType: "task"``."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str


async def _poll(session: Any, task_id: str) -> dict[str, Any]:
    with anyio.fail_after(30):
        while True:
            task = await session.send_request(_get(task_id), _ANY)
            if task["status"] in TERMINAL:
                return task
            await anyio.sleep(0.1)


async def _follow(created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
    """What `Client.call_tool` answers for a task: the call's result once the task is done."""
    task = await _poll(ctx.session, created.task_id)
    return types.CallToolResult.model_validate(task["result"])


class TasksExtension(ClientExtension):
    identifier = TASKS_EXTENSION

    def claims(self) -> tuple[ResultClaim[Any], ...]:
        return (ResultClaim(result_type="task", model=CreatedTask, resolve=_follow),)


def _get(task_id: str) -> types.GetTaskRequest:
    return types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))


class TaskAgent:
    """One principal's client, following its write proposals as tasks in one era."""

    def __init__(self, client: Client, era: str) -> None:
        self.client = client
        self.era = era

    async def propose(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The raw answer to a task-augmented ``tools/call``."""
        if self.era == MODERN:
            created = await self.client.session.call_tool(name, arguments, allow_claimed=True)
            return created.model_dump(by_alias=True, mode="json", exclude_none=True)
        params = {"name": name, "arguments": arguments, "task": {"ttl": 60_000}}
        return await self.client.session._dispatcher.send_raw_request("tools/call", params, {})  # type: ignore[no-any-return]

    @staticmethod
    def task_id(created: dict[str, Any]) -> str:
        return str(created["taskId"] if "taskId" in created else created["task"]["taskId"])

    async def get(self, task_id: str) -> dict[str, Any]:
        return await self.client.session.send_request(_get(task_id), _ANY)

    async def settled(self, task_id: str) -> dict[str, Any]:
        """``tasks/get`` until the task is terminal (bounded)."""
        return await _poll(self.client.session, task_id)

    async def result(self, task_id: str) -> dict[str, Any]:
        request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
        return await self.client.session.send_request(request, _ANY)

    async def cancel(self, task_id: str) -> dict[str, Any]:
        request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
        return await self.client.session.send_request(request, _ANY)

    async def list(self) -> dict[str, Any]:
        return await self.client.session.send_request(types.ListTasksRequest(), _ANY)


@asynccontextmanager
async def task_agent(mcp_url: str, token: str, era: str, *, tasks: bool = True) -> AsyncIterator[TaskAgent]:
    """A real MCP client over Streamable HTTP; in the 2026 era it declares the tasks extension if `tasks`."""
    mode = MODERN if era == MODERN else LEGACY
    extensions = [TasksExtension()] if tasks and era == MODERN else None
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=10) as http:
        transport = streamable_http_client(mcp_url, http_client=http)
        async with Client(transport, mode=mode, extensions=extensions) as client:  # type: ignore[arg-type]
            yield TaskAgent(client, era)
