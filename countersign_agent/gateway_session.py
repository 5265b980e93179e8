"""The agent's side of MCP: one connection to a gateway with a bearer key, through the official client.

It lists the tools this key may use, calls them, and follows the approval cards write proposals
filed. Two ways to follow a card, chosen by what the server offers:

* as an MCP task: the client declares the tasks extension (``io.modelcontextprotocol/tasks``) and,
  when the server offers it too, a write tool answers with a task whose id is the card's;
  ``tasks/get`` is polled until the task is terminal;
* otherwise with the ``approvals_status`` tool, polled until the card is final.

It decides nothing about what to call: the loop does, from the names this module listed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict

from countersign_agent.errors import GatewayClientError

__all__ = ["CallResult", "CardRef", "GatewaySession", "ListedTool", "Outcome", "connect"]

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
WITHHELD_MARK = "[withheld:"
"""How the gateway marks a place where it withheld third-party text from the model."""
FINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "REJECTED", "EXPIRED", "CANCELLED", "NEEDS_RECONCILIATION"})
"""Card states after which nothing more happens without a person (``approvals_status``'s ``status``)."""
_TASK_CODES = {"REJECTED": "REJECTED", "EXPIRED": "EXPIRED", "WRITE_FAILED": "FAILED", "CANCELLED": "CANCELLED"}


@dataclass(frozen=True, slots=True)
class ListedTool:
    """A tool as ``tools/list`` showed it to this key."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    read_only: bool
    """``readOnlyHint``: absent means the tool may change things (the MCP default)."""
    open_world: bool
    """``openWorldHint``: absent means its results may come from outside (the MCP default)."""


@dataclass(frozen=True, slots=True)
class CardRef:
    """An approval card a call filed (or found open), and how it is followed."""

    card_id: str
    tool: str
    as_task: bool


@dataclass(frozen=True, slots=True)
class CallResult:
    """One tool call's answer, as data for the model."""

    ok: bool
    data: Mapping[str, Any]
    untrusted: bool
    """Whether the result may carry text written by third parties (an open-world tool, or a place where
    the gateway withheld such text): the prompt fences it as data that gives no instructions."""
    card: CardRef | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What came of a card, as the gateway reports it."""

    card_id: str
    tool: str
    state: str
    """``SUCCEEDED``, ``REJECTED``, ``EXPIRED``, ``FAILED``, ``CANCELLED``, ``NEEDS_RECONCILIATION``, or
    the last state seen when `settled` is False."""
    said: str
    reference: str | None
    settled: bool
    """False when following stopped at its deadline before the card was final."""


class _CreatedTask(types.Result):
    """A tasks-extension ``CreateTaskResult``: flat task fields beside ``resultType: "task"``."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None


async def _unfollowed(created: _CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
    raise GatewayClientError("a task is followed by GatewaySession.follow, not inside call_tool")


class _TaskStatus(types.Result):
    """A ``tasks/get`` answer of the tasks extension; ``result`` is inlined once completed."""

    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None


class _TasksExtension(ClientExtension):
    identifier = TASKS_EXTENSION

    def claims(self) -> tuple[ResultClaim[Any], ...]:
        return (ResultClaim(result_type="task", model=_CreatedTask, resolve=_unfollowed),)


class GatewaySession:
    """An open MCP connection: `tools`, `call`, `follow`. Build it with `connect`."""

    def __init__(self, client: Client, tools: list[ListedTool], *, tasks: bool) -> None:
        self._client = client
        self.tools = tools
        self.tasks = tasks
        """Whether write proposals come back as tasks (the server offers the extension and we asked)."""
        self._by_name = {tool.name: tool for tool in tools}

    def tool(self, name: str) -> ListedTool | None:
        return self._by_name.get(name)

    async def call(self, name: str, arguments: Mapping[str, Any]) -> CallResult:
        """Call a listed tool. A refusal is a result (``ok`` False), never an exception."""
        tool = self._by_name[name]
        try:
            answer = await self._client.session.call_tool(name, dict(arguments), allow_claimed=True)
        except MCPError as error:
            return CallResult(
                ok=False, untrusted=False, data={"error": {"code": _code_of(error), "message": error.error.message}}
            )
        if isinstance(answer, _CreatedTask):
            data = {
                "card_id": answer.task_id,
                "status": answer.status,
                "followed_as": "task",
                "said": answer.status_message or "",
            }
            return CallResult(ok=True, data=data, untrusted=False, card=CardRef(answer.task_id, name, as_task=True))
        if not isinstance(answer, types.CallToolResult):
            return CallResult(ok=False, untrusted=False, data={"error": {"code": "UNEXPECTED_RESULT"}})
        data = _data_of(answer)
        untrusted = tool.open_world or WITHHELD_MARK in json.dumps(data, ensure_ascii=False)
        card = None
        # A card to follow: filed (or found open) by a tool that changes things. A cancel's answer names
        # its card too, but a final card has nothing left to follow.
        if (
            not answer.is_error
            and not tool.read_only
            and isinstance(data.get("card_id"), str)
            and data.get("status") not in FINAL_STATES
        ):
            card = CardRef(str(data["card_id"]), name, as_task=False)
        return CallResult(ok=not answer.is_error, data=data, untrusted=untrusted, card=card)

    async def follow(self, card: CardRef, *, timeout_seconds: float, max_poll_seconds: float) -> Outcome:
        """Poll the card until it is final, or until `timeout_seconds` (then ``settled`` is False)."""
        last = Outcome(card.card_id, card.tool, "PENDING", "waiting for approval", None, settled=False)
        with anyio.move_on_after(timeout_seconds):
            while True:
                seen, poll = await (self._task(card) if card.as_task else self._status(card))
                last = seen
                if seen.settled:
                    return seen
                await anyio.sleep(min(poll, max_poll_seconds))
        return last

    async def _task(self, card: CardRef) -> tuple[Outcome, float]:
        request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=card.card_id))
        task = await self._client.session.send_request(request, _TaskStatus)
        poll = (task.poll_interval_ms or 1000) / 1000
        said = task.status_message or ""
        if task.status == "cancelled":
            return Outcome(card.card_id, card.tool, "CANCELLED", said or "cancelled", None, settled=True), poll
        if task.status == "failed":
            return Outcome(card.card_id, card.tool, "FAILED", said or "the task failed", None, settled=True), poll
        if task.status != "completed":
            return Outcome(card.card_id, card.tool, "PENDING", said, None, settled=False), poll
        result = types.CallToolResult.model_validate(task.result or {"content": [], "isError": True})
        data = _data_of(result)
        if result.is_error:
            error = _mapping(data.get("error"))
            state = _TASK_CODES.get(str(error.get("code")), str(error.get("code") or "FAILED"))
            return Outcome(card.card_id, card.tool, state, str(error.get("message") or said), None, True), poll
        return _from_receipt(card, data), poll

    async def _status(self, card: CardRef) -> tuple[Outcome, float]:
        answer = await self._client.session.call_tool("approvals_status", {"card_id": card.card_id})
        data = _data_of(answer)
        if answer.is_error:
            error = _mapping(data.get("error"))
            raise GatewayClientError(f"approvals_status refused {card.card_id}: {error.get('code')}")
        return _from_receipt(card, data), 1.0


def _from_receipt(card: CardRef, data: Mapping[str, Any]) -> Outcome:
    state = str(data.get("status") or "UNKNOWN")
    reference = data.get("reference")
    return Outcome(
        card.card_id,
        card.tool,
        state,
        str(data.get("said") or ""),
        reference if isinstance(reference, str) else None,
        settled=state in FINAL_STATES,
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _data_of(result: types.CallToolResult) -> dict[str, Any]:
    if isinstance(result.structured_content, dict):
        return dict(result.structured_content)
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    try:
        value = json.loads("".join(texts))
    except ValueError:
        return {"text": "".join(texts)}
    return value if isinstance(value, dict) else {"value": value}


def _code_of(error: MCPError) -> str:
    data = error.error.data
    if isinstance(data, dict) and isinstance(data.get("code"), str):
        return str(data["code"])
    return f"JSONRPC_{error.error.code}"


def _leaf(error: BaseException) -> BaseException:
    """The first real error inside the task groups the SDK's transports raise through."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _listed(tool: types.Tool) -> ListedTool:
    hints = tool.annotations
    return ListedTool(
        name=tool.name,
        description=tool.description or "",
        input_schema=dict(tool.input_schema),
        read_only=bool(hints is not None and hints.read_only_hint),
        open_world=not (hints is not None and hints.open_world_hint is False),
    )


@asynccontextmanager
async def connect(url: str, key: str, *, tasks: bool = True, mode: str = "auto") -> AsyncIterator[GatewaySession]:
    """Connect to the gateway's MCP endpoint `url` with the bearer `key` and list its tools.

    `tasks` asks to follow proposals as tasks (used when the server offers them); `mode` is the
    SDK's: ``auto`` (the newest era the server speaks) or ``legacy`` (the 2025-11-25 handshake, where
    this client follows cards with ``approvals_status``).

    Raises:
        GatewayClientError: the gateway could not be reached or refused the key.
    """
    extensions = [_TasksExtension()] if tasks and mode != "legacy" else None
    async with (
        httpx2.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=30) as http,
        AsyncExitStack() as stack,
    ):
        client = Client(streamable_http_client(url, http_client=http), mode=mode, extensions=extensions)
        try:
            await stack.enter_async_context(client)
        except Exception as error:  # the boundary: any failure to open a session is the gateway's to explain
            cause = _leaf(error)
            raise GatewayClientError(f"cannot open an MCP session at {url}: {type(cause).__name__}: {cause}") from error
        listed = [_listed(tool) for tool in (await client.list_tools()).tools]
        offered = TASKS_EXTENSION in (client.server_capabilities.extensions or {})
        yield GatewaySession(client, listed, tasks=bool(extensions) and offered)
