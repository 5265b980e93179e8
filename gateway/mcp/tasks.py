"""MCP tasks on the wire: a write proposal answered as a task, and ``tasks/*``, in both protocol eras.

It translates `gateway.executor.TaskPath` answers (a `TaskState`, or a refusal `Code`) to the wire
and decides nothing: which card a task is, who may see it and what its status means are the
executor's and `gateway.cards.task_states`'.

Two wire shapes, chosen per request by what the client declared:

* the tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663), declared in a 2026-07-28
  request's capabilities: a proposal answers with a
  flat ``resultType: "task"``; ``tasks/get`` inlines the call's ``result`` once completed (a write
  that did not happen is ``completed`` with ``isError``); ``tasks/cancel`` is an empty ack. A
  request that did not declare it gets ``-32021`` from ``tasks/*``.
* the 2025-11-25 experimental tasks, whatever extensions the session declared at initialize (the
  extension's shapes cannot be sent on that era's wire): a ``tools/call`` carrying ``task`` answers
  ``{"task": ...}`` and one without it gets the card receipt;
  ``tasks/result`` waits for the terminal result and tags it with ``related-task``; an ``isError``
  result is ``failed``, as that revision says; ``tasks/cancel`` answers the cancelled task, and
  ``-32602`` when the task can no longer be cancelled.

``tasks/list`` is served in both: every task is bound to its requester, so a list can only ever
hold the caller's own. An unknown task and another principal's are the same ``-32602``; a refusal
carries its stable code as the error's data.

No ``notifications/tasks/status`` (2025-11-25) nor ``notifications/tasks`` (2026-07-28) are sent:
cards are decided in the admin API and run by the worker, possibly in another process, so the MCP
process holding the client's stream learns of a change only by reading the ledger. Clients poll
(``pollIntervalMs``), as both revisions allow.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Mapping
from typing import Any, Literal

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types import CLIENT_CAPABILITIES_META_KEY
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gateway.auth.bearer import principal_of
from gateway.canonical import iso_from_ms
from gateway.cards.task_states import TaskState
from gateway.codes import Code
from gateway.envelope import Envelope
from gateway.executor import TaskPath, Throttled
from gateway.principal import Principal

__all__ = ["TASKS_EXTENSION", "McpTasks", "request_principal", "tool_result"]

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
"""SEP-2575's code for a request that needs a capability the client did not declare."""

Era = Literal["extension", "experimental"]

_LEGACY_ANSWER: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("legacy_task", default=None)
"""Where a 2025-era proposal leaves its ``CreateTaskResult`` for `McpTasks._legacy_calls` to send:
the SDK shapes a ``tools/call`` answer as a ``CallToolResult`` for that era, which has no ``task``."""


def request_principal(ctx: ServerRequestContext[Any, Any]) -> Principal:
    """The authenticated caller of an MCP request (the auth middleware put it in the scope)."""
    request = ctx.request
    if request is None:
        raise MCPError(INVALID_REQUEST, "Countersign serves MCP over authenticated HTTP only")
    return principal_of(request.scope)


def tool_result(envelope: Envelope) -> types.CallToolResult:
    """An envelope as a ``tools/call`` result: its model projection, as structured content and as text.

    A refusal's text opens with its one sentence (``error.message``), then a blank line, then the JSON:
    agent frameworks show a refusal as the text alone, as a repr of the result, or as a generic "an
    error occurred" with the text beside it, and in each the sentence the model can act on comes first.
    """
    structured = envelope.for_model()
    text = json.dumps(structured, ensure_ascii=False, separators=(",", ":"))
    error = structured.get("error") if envelope.is_error else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        text = f"{error['message']}\n\n{text}"
    return types.CallToolResult(
        content=[types.TextContent(text=text)], structured_content=structured, is_error=envelope.is_error
    )


class McpTasks:
    """The tasks half of the MCP surface, installed on its SDK server."""

    def __init__(self, tasks: TaskPath) -> None:
        self._tasks = tasks

    def install(self, server: Server[Any], *, advertise: bool) -> None:
        """Serve ``tasks/*`` on `server`; advertise the extension only if `advertise` (proposals may be tasks).

        The methods stay served either way, so a task opened before a configuration change can be followed."""
        server.add_request_handler("tasks/get", types.GetTaskRequestParams, self._get)
        server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, self._result)
        server.add_request_handler("tasks/list", types.PaginatedRequestParams, self._list)
        server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, self._cancel)
        server.add_request_handler("tasks/update", types.GetTaskRequestParams, self._update)
        server.middleware.append(self._legacy_calls)
        if advertise:
            server.extensions[TASKS_EXTENSION] = {}

    async def proposal(self, ctx: ServerRequestContext[Any, Any], card_id: str) -> dict[str, Any] | None:
        """The task answer to a proposal that filed (or found) card `card_id`; None: answer with the receipt.

        None when the client did not ask for tasks, or the task could not be read back (then the
        receipt, which the card already backs durably, is the answer).
        """
        era = _call_era(ctx)
        if era is None:
            return None
        state = await self._tasks.opened(request_principal(ctx), card_id)
        if isinstance(state, Code):
            return None
        if era == "extension":
            return {"resultType": "task", **_task(state, era)}
        holder = _LEGACY_ANSWER.get()
        if holder is not None:
            holder["task"] = _task(state, era)
        return None

    async def _legacy_calls(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Send a 2025-era task-augmented proposal's ``CreateTaskResult`` in place of its receipt."""
        if ctx.method != "tools/call" or _call_era(ctx) != "experimental":
            return await call_next(ctx)
        holder: dict[str, Any] = {}
        token = _LEGACY_ANSWER.set(holder)
        try:
            answer = await call_next(ctx)
        finally:
            _LEGACY_ANSWER.reset(token)
        return holder or answer

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams) -> dict[str, Any]:
        era = _follow_era(ctx)
        state = _found(await self._tasks.get(request_principal(ctx), params.task_id))
        task = _task(state, era)
        if era == "extension" and state.status == "completed" and state.result is not None:
            task["result"] = _dumped(tool_result(state.result))
        return task

    async def _result(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskPayloadRequestParams
    ) -> dict[str, Any]:
        if _follow_era(ctx) == "extension":
            # SEP-2663 has no tasks/result: tasks/get inlines the result.
            raise MCPError(-32601, "Method not found", data="tasks/result")
        state = _found(await self._tasks.result(request_principal(ctx), params.task_id))
        result = _dumped(tool_result(state.result or Envelope.refused(Code.INTERNAL_ERROR)))
        result.pop("resultType", None)  # a 2026-07-28 field; this is the 2025-11-25 wire
        result["_meta"] = {RELATED_TASK: {"taskId": state.task_id}}
        return result

    async def _list(self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams) -> dict[str, Any]:
        era = _follow_era(ctx)
        if params.cursor is not None:
            # One page holds every task listed; a cursor is one this server never gave.
            raise MCPError(INVALID_PARAMS, "Invalid cursor", data={"code": Code.VALIDATION_ERROR.value})
        states = await self._tasks.list(request_principal(ctx))
        if isinstance(states, Code | Throttled):
            raise _error(states)
        return {"tasks": [_task(state, era) for state in states]}

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams) -> dict[str, Any]:
        """SEP-2663 ``tasks/update``: a proposal's task never asks its client for input (a person decides
        on the card), so no key is ever outstanding and every response is ignored, as the spec says."""
        if _follow_era(ctx) != "extension":
            raise MCPError(-32601, "Method not found", data="tasks/update")
        _found(await self._tasks.get(request_principal(ctx), params.task_id))
        return {}

    async def _cancel(
        self, ctx: ServerRequestContext[Any, Any], params: types.CancelTaskRequestParams
    ) -> dict[str, Any]:
        era = _follow_era(ctx)
        cancelled = await self._tasks.cancel(request_principal(ctx), params.task_id)
        if isinstance(cancelled, Code | Throttled):
            raise _error(cancelled)
        state, now = cancelled
        if era == "extension":
            return {}  # an acknowledgement; the status says whether it took effect
        if not now:
            # 2025-11-25: cancelling a terminal task is -32602; so is one already running, which
            # the gateway can no longer stop (its write may be reaching the backend).
            raise MCPError(
                INVALID_PARAMS,
                "Cannot cancel task: it already ran or is running",
                data={"code": Code.CONFLICT.value, "status": _task(state, era)["status"]},
            )
        return _task(state, era)


def _declared_extension(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request follows tasks as the 2026-07-28 extension.

    Read per era: the extension's wire shapes (``resultType: "task"``, ``tasks/get`` inlining the
    result) exist only in 2026-07-28, so a 2025-11-25 session that declared it at initialize (as the
    MCP Inspector does) still speaks 2025-11-25, and its answers must be 2025 shapes. The SDK's
    serializer for that era refuses a 2026 task after the card was filed.
    """
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    params = ctx.params if isinstance(ctx.params, Mapping) else {}
    meta = params.get("_meta")
    declared = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, Mapping) else None
    if isinstance(declared, Mapping) and isinstance(declared.get("extensions"), Mapping):
        if TASKS_EXTENSION in declared["extensions"]:
            return True
    capabilities = ctx.session.client_capabilities if ctx.session is not None else None
    return capabilities is not None and TASKS_EXTENSION in (capabilities.extensions or {})


def _call_era(ctx: ServerRequestContext[Any, Any]) -> Era | None:
    """How the client of this ``tools/call`` follows tasks, or None (it gets the card receipt)."""
    if _declared_extension(ctx):
        return "extension"
    params = ctx.params if isinstance(ctx.params, Mapping) else {}
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS and isinstance(params.get("task"), Mapping):
        return "experimental"
    return None


def _follow_era(ctx: ServerRequestContext[Any, Any]) -> Era:
    """The wire shape of a ``tasks/*`` request; a 2026-era request without the extension is refused."""
    if _declared_extension(ctx):
        return "extension"
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return "experimental"
    raise MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        "Missing required client capability",
        data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def _found(state: TaskState | Code | Throttled) -> TaskState:
    if isinstance(state, Code | Throttled):
        raise _error(state)
    return state


def _error(refusal: Code | Throttled) -> MCPError:
    if isinstance(refusal, Throttled):
        # The caller's read budget is spent: the same JSON-RPC error a spent budget gives at the edge.
        wait = {"code": Code.RATE_LIMITED.value, "retryable": True, "retry_after": refusal.retry_after}
        return MCPError(INTERNAL_ERROR, Envelope.refused(Code.RATE_LIMITED).for_model()["error"]["message"], data=wait)
    if refusal is Code.NOT_FOUND:
        return MCPError(INVALID_PARAMS, "Failed to retrieve task: Task not found", data={"code": refusal.value})
    message = Envelope.refused(refusal).for_model()["error"]["message"]
    return MCPError(INTERNAL_ERROR, message, data={"code": refusal.value})


def _task(state: TaskState, era: Era) -> dict[str, Any]:
    """The task's own fields, named as `era` names them."""
    status: str = state.status
    if era == "experimental" and state.status == "completed" and state.result is not None and state.result.is_error:
        status = "failed"  # 2025-11-25: a tool result with isError is a failed task
    task: dict[str, Any] = {
        "taskId": state.task_id,
        "status": status,
        "statusMessage": state.message,
        "createdAt": iso_from_ms(state.created_ms),
        "lastUpdatedAt": iso_from_ms(state.updated_ms),
    }
    if era == "extension":
        task.update(ttlMs=state.ttl_ms, pollIntervalMs=state.poll_interval_ms)
    else:
        task.update(ttl=state.ttl_ms, pollInterval=state.poll_interval_ms)
    return task


def _dumped(result: types.CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)
