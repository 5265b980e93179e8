"""The MCP surface: ``/mcp`` over Streamable HTTP, built on the official SDK's low-level `Server`.

It translates and decides nothing. ``tools/list`` is the caller's `Catalog` view; ``tools/call``
hands the principal, the name and the raw arguments to the executor's `AgentPath` and returns its envelope's
model projection. Both protocol eras the SDK speaks are served by one session manager: the
2025-11-25 initialize handshake (stateful sessions, bound to the key that opened them, at most
`sessions_per_key` of them per key, closed after `session_idle_seconds` unused:
`gateway.mcp.sessions`) and the per-request 2026-07-28 envelope. A listing spends from the caller's
listing budget (`AgentPath.listing_refusal`), as tools/call and tasks/* spend from theirs. The layers in
front of the SDK, the budget front among them (a ``tools/call`` the caller's spent budget certainly refuses is answered
without the SDK, so a flood costs little more than its HTTP), are assembled in `gateway.mcp.stack`
from what this surface exposes: `session_manager`, `server`, `held_refusal`, `listed_schema` and
`flood_audit`.

A client that declares MCP Apps views (``io.modelcontextprotocol/ui``) is told which view each tool's
results open, and a result's view what it may open (`gateway.mcp.apps`); the app-only tools those views
call are listed to it alone, marked for the views (the host keeps them from its model). Any other client
gets the same listing and results as if views did not exist.

A client that declares task support follows a write proposal as a task bound to its card
(`gateway.mcp.tasks`); any other client gets the card receipt and the approvals tools. A deployment
with ``write_task_support = "forbidden"`` answers every proposal with the receipt, at once.

A listed tool says what it does: its ``outputSchema`` covers every structured result it can answer,
refusals included (`gateway.tools.output_schema`); its hints are what the tool declares, and a hint it did
not declare is left out. A 2026-era listing is ``cacheScope: private`` (a catalog is one caller's)
and fresh for the registry poll interval, the fastest the tools served can change.

Failure planes: a malformed request is the SDK's JSON-RPC error. Everything about a tool (unknown,
forbidden, invalid arguments, upstream failure) is an ``isError`` result the model can read,
and an unknown name reads exactly like a forbidden one.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

import mcp_types as types
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.models import InitializationOptions
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INTERNAL_ERROR
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from opentelemetry import context as otel_context
from opentelemetry import propagate
from starlette.types import Scope

from gateway.audit.events import AuditEvent, AuditSink
from gateway.auth.bearer import caller_of
from gateway.codes import Code
from gateway.executor import AgentPath, TaskPath
from gateway.executor.views import ViewPath
from gateway.mcp.apps import McpApps
from gateway.mcp.budget_front import Held
from gateway.mcp.flood_audit import FloodAudit
from gateway.mcp.sessions import KeyedSessionManager, SessionQuotaExceededError
from gateway.mcp.tasks import McpTasks, request_principal, tool_result
from gateway.telemetry.log_context import bind_key_id
from gateway.telemetry.tracing import installed
from gateway.tools.catalog import Catalog
from gateway.tools.declarations import Mode, Tool
from gateway.tools.toolbox import Toolbox

__all__ = ["McpSurface"]

logger = logging.getLogger(__name__)

MAX_NOTIFIED_SESSIONS = 10_000


class McpSurface:
    """The MCP server and its HTTP endpoint. One instance serves one app lifetime."""

    def __init__(
        self,
        *,
        catalog: Catalog,
        executor: AgentPath,
        tasks: TaskPath,
        views: ViewPath | None,
        version: str,
        stateless: bool,
        catalog_ttl_ms: int,
        audit: AuditSink,
        sessions_per_key: int = 32,
        session_idle_seconds: float = 600.0,
        write_task_support: Literal["optional", "forbidden"] = "optional",
        console_url: str | None = None,
    ) -> None:
        self._catalog = catalog
        # "forbidden": every proposal answers its receipt at once, and no task support is advertised
        # (`gateway.config.settings.Settings.write_task_support`).
        self._write_tasks = write_task_support
        self._audit = audit
        # How long a 2026-era client may keep a tools/list answer: as long as the catalog can go
        # without changing (the registry poll interval); never shared across callers.
        self._catalog_ttl_ms = catalog_ttl_ms
        self._executor = executor
        # Wire definitions are built once per set of tools; a listing only filters them.
        self._box: Toolbox | None = None
        self._definitions: dict[str, types.Tool] = {}
        # One request's session proxy per open connection that listed tools, to tell it when the
        # catalog changes (the proxy's standalone channel outlives the request). Keyed by the MCP
        # session id (else the connection) so a client that lists often is held once; a session is
        # dropped when the manager closes it (DELETE, idle timeout), others when telling them fails.
        self._sessions: dict[str | int, Any] = {}
        self.server: Server[Any] = _Server(
            write_tasks=write_task_support == "optional",
            name="countersign",
            version=version,
            instructions=(
                "Countersign gateway. Read tools answer directly. Write tools only request approval: "
                "nothing changes until an administrator approves."
            ),
            on_list_tools=self._list_tools,
            # Without this lookup the SDK runs the whole tools/list handler inside every 2026-era
            # tools/call, to check Mcp-Param headers. The executor enforces access regardless.
            get_tool_input_schema=self._input_schema,
        )
        # Outermost, before the SDK's own span: name the caller for the logs, and let an HTTP
        # `traceparent` parent the MCP span when `params._meta` carries none.
        self.server.middleware.insert(0, _request_context)
        if not installed():
            # No tracer provider: the SDK's span per message would be a no-op that still switches
            # contexts, the largest telemetry cost of a call (bench/telemetry_cost.py).
            self.server.middleware = [m for m in self.server.middleware if not isinstance(m, OpenTelemetryMiddleware)]
        # tools/call answers a CallToolResult, or a task for a client that follows tasks.
        self.server.add_request_handler("tools/call", types.CallToolRequestParams, self._call_tool)
        self._task_path = tasks
        self._tasks = McpTasks(tasks)
        self._tasks.install(self.server, advertise=write_task_support == "optional")
        # MCP Apps views for clients that declare them; None serves no view (as before views existed).
        self._apps = McpApps(views, console_url=console_url) if views is not None else None
        if self._apps is not None:
            self._apps.install(self.server)
        # Host and Origin are checked in front of this surface, before authentication, with stable
        # codes and an audit event (`gateway.mcp.stack`): the SDK's check would repeat it.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self.session_manager = KeyedSessionManager(
            self.server,
            sessions_per_key=sessions_per_key,
            on_refused=self._session_refused,
            on_closed=self._session_closed,
            stateless=stateless,
            security_settings=security,
            session_idle_timeout=session_idle_seconds,
        )
        self.flood_audit = FloodAudit(audit)
        """Where the budget front counts the refusals it answers; written out when `run` ends."""
        self.held_refusal: Held = executor.held_refusal
        """The refusal the caller's spent budget certainly gives a call now, for the budget front."""

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Serve (the SDK's session manager); on the way out, write the pending flood and task poll audits."""
        try:
            async with self.session_manager.run():
                yield
        finally:
            await self.flood_audit.aclose()
            await self._task_path.aclose()

    async def _session_refused(self, scope: Scope, refusal: SessionQuotaExceededError) -> None:
        caller = caller_of(scope)
        await self._audit.record(
            AuditEvent(
                action="mcp.session",
                outcome="deny",
                subject=caller.subject if caller else "",
                org=caller.org if caller else "",
                key_id=refusal.key_id,
                code=Code.QUOTA_EXCEEDED.value,
                reason=f"{refusal.open_sessions} sessions open for this key; the limit is {refusal.limit}",
                extra={"limit": str(refusal.limit), "open": str(refusal.open_sessions)},
            )
        )

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        schema = self.listed_schema(name)
        return dict(schema) if schema is not None else None

    def listed_schema(self, name: str) -> Mapping[str, Any] | None:
        """The input schema `name` is listed with (the same object while the catalog does not change)."""
        box = self._catalog.current()
        return box.input_schema(name) if name in box else None

    async def tools_changed(self) -> None:
        """Send ``notifications/tools/list_changed`` to every open session that can receive it."""
        told = 0
        for key, session in list(self._sessions.items()):
            try:
                await session.send_tool_list_changed()
                told += 1
            except Exception as error:  # a closed or stateless session cannot be told; forget it
                logger.debug("could not notify a session: %s", type(error).__name__)
                self._sessions.pop(key, None)
        logger.info("tool list changed; told %d of the open sessions", told)

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        principal = request_principal(ctx)
        refused = await self._executor.listing_refusal(principal)
        if refused is not None:
            # A listing is under a budget like any other door that works for the caller; past it, the JSON-RPC
            # error a spent budget gives a task request, with the wait.
            error = refused.envelope.for_model()["error"]
            data = {
                "code": error["code"],
                "retryable": error.get("retryable", False),
                "retry_after": refused.retry_after,
            }
            raise MCPError(INTERNAL_ERROR, error["message"], data=data)
        if ctx.session is not None and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            # Only handshake-era sessions have a standing channel; 2026-era requests stand alone.
            connection = getattr(ctx.session, "_connection", ctx.session)
            session_id = ctx.request.headers.get(MCP_SESSION_ID_HEADER) if ctx.request is not None else None
            if len(self._sessions) >= MAX_NOTIFIED_SESSIONS:
                self._sessions.pop(next(iter(self._sessions)))
            self._sessions[session_id or id(connection)] = ctx.session
        box = self._catalog.current()
        if box is not self._box:
            self._definitions = {tool.name: _definition(tool, box, self._write_tasks) for tool in box.values()}
            self._box = box
        definitions = self._definitions
        visible = self._catalog.visible_to(principal, box)
        if self._apps is not None and self._apps.declared(ctx):
            listed = [self._apps.listed(definitions[t.name], t) for t in visible] + self._apps.app_tools()
        else:
            listed = [definitions[t.name] for t in visible]
        return types.ListToolsResult(
            tools=listed,
            # A catalog is one caller's: a shared cache would hand it to callers with other access.
            cache_scope="private",
            ttl_ms=self._catalog_ttl_ms,
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | dict[str, Any]:
        if self._apps is not None and self._apps.is_app_only(params.name):
            return await self._apps.call_app_tool(ctx, params)
        envelope = await self._executor.execute(
            request_principal(ctx), params.name, params.arguments, session=_session_id(ctx)
        )
        if envelope.card_id is not None and self._write_tasks == "optional":
            task = await self._tasks.proposal(ctx, envelope.card_id)
            if task is not None:
                return task
        if self._apps is None:
            return tool_result(envelope)
        tool = self._catalog.current().get(params.name)
        return await self._apps.with_view(ctx, tool, params, tool_result(envelope), envelope)

    def _session_closed(self, session_id: str) -> None:
        """Drop what this process holds of a closed session: its notification channel and its taint."""
        self._sessions.pop(session_id, None)
        self._executor.forget_session(session_id)


def _session_id(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The 2025-11-25 session a request came in (the SDK checked the id is one it opened); None for the 2026-era
    envelope and a stateless gateway, which hold no session."""
    if ctx.session is None or ctx.request is None or ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return None
    session_id: str | None = ctx.request.headers.get(MCP_SESSION_ID_HEADER)
    return session_id


class _Server(Server[Any]):
    """The SDK server, advertising that the tool list can change (adapters are accepted live), and on
    the 2025-11-25 handshake the experimental tasks (tools/call, tasks/list, tasks/cancel) unless
    writes are never answered as tasks."""

    def __init__(self, *, write_tasks: bool, name: str, **options: Any) -> None:
        super().__init__(name, **options)
        self._write_tasks = write_tasks

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> types.ServerCapabilities:
        capabilities = super().get_capabilities(
            notification_options, experimental_capabilities, extensions, protocol_version=protocol_version
        )
        if protocol_version in MODERN_PROTOCOL_VERSIONS or not self._write_tasks:
            return capabilities  # 2026-07-28 offers tasks only as the extension
        tasks = types.ServerTasksCapability(
            list=types.TasksListCapability(),
            cancel=types.TasksCancelCapability(),
            requests=types.ServerTasksRequestsCapability(
                tools=types.TasksToolsCapability(call=types.TasksCallCapability())
            ),
        )
        return capabilities.model_copy(update={"tasks": tasks})

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True), experimental_capabilities, extensions
        )


async def _request_context(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Bind the request's key id for log records, and its HTTP trace context where ``_meta`` has none.

    Messages of a handshake-era session run outside the HTTP request that delivered them, so
    neither would otherwise reach the handler."""
    request = ctx.request
    if request is None:
        return await call_next(ctx)
    principal = caller_of(request.scope)
    if principal is not None:
        bind_key_id(principal.key_id)
    header = request.headers.get("traceparent")
    if header is None or (ctx.meta is not None and "traceparent" in ctx.meta):
        return await call_next(ctx)
    token = otel_context.attach(propagate.extract(request.headers))
    try:
        return await call_next(ctx)
    finally:
        otel_context.detach(token)


def _definition(tool: Tool, box: Toolbox, write_tasks: Literal["optional", "forbidden"]) -> types.Tool:
    return types.Tool(
        name=tool.name,
        title=tool.title,
        description=_described(tool),
        input_schema=dict(box.input_schema(tool.name)),
        output_schema=dict(box.output_schema(tool.name)),
        annotations=_annotations(tool),
        # 2025-11-25: a write may be followed as a task (the 2026 tasks extension needs no per-tool flag).
        execution=types.ToolExecution(task_support=write_tasks) if tool.mode is Mode.WRITE else None,
    )


def _annotations(tool: Tool) -> types.ToolAnnotations:
    """Hints that say what the tool does; a hint a tool did not declare is left out, never guessed.

    The MCP defaults of a left-out hint are the cautious ones (destructive, open world). The
    destructive and idempotent hints mean something only for a tool that changes things.
    """
    read = tool.mode is Mode.READ and not tool.changes_cards
    return types.ToolAnnotations(
        title=tool.title,
        read_only_hint=read,
        destructive_hint=None if read else tool.destructive,
        # The gateway keys every write: a repeated proposal returns the open card, and the approved
        # write runs once under the key minted with the card. Cancelling a card twice changes nothing.
        idempotent_hint=None if read else True,
        open_world_hint=tool.open_world,
    )


PROPOSAL_PREFIX = "Requests approval"


def _described(tool: Tool) -> str:
    """Every write is described as what it is for an agent: a request for approval, never an action."""
    if tool.mode is not Mode.WRITE or tool.description.startswith(PROPOSAL_PREFIX):
        return tool.description
    return f"{PROPOSAL_PREFIX}; nothing happens until an administrator approves. {tool.description}"
