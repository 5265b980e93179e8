"""MCP Apps (extension ``io.modelcontextprotocol/ui``) on the wire: views for the person behind the agent.

It translates and decides nothing: which results open a view, what a view may open and who may call
the app-only tools is `gateway.executor.views.ViewPath`'s. Only for a client that declared the
extension with ``text/html;profile=mcp-app`` among its ``mimeTypes``:

* ``tools/list`` names a view in each tool's ``_meta.ui.resourceUri``: `READ_VIEW` for a read whose
  result carries third-party text (the stranger's text the model never sees), `CARD_VIEW` for a write
  (the card it files). The app-only tools (`gateway.executor.views.APP_TOOLS`) are listed with
  ``_meta.ui.visibility: ["app"]``, which the extension obliges a host to keep out of the model's tool
  list and to require of any ``tools/call`` a view sends; they are listed to no other client, whose
  listing is the model's.
* a read's ``tools/call`` result carries, in ``_meta["io.countersign/view"]``, a single-use handle to its
  human render; a write's carries its card id. Content and structured content are the same bytes every
  client gets: what the model sees does not change.

A client that did not declare the extension gets exactly what it got before views existed: the same
tool list, the same results, and an app-only name refused as an unknown tool is.

The views are static files of this package (``view_assets/``), served as ``ui://`` resources by
``resources/read`` to any caller (they hold no data): one HTML document each, its script and style
inline and allowed by hash in its own Content-Security-Policy, which forbids every network request,
frame, form and base URI; ``_meta.ui.csp`` declares no domain for the host to open. Only
``resources/read`` is served (no ``resources/list``), so the server's capabilities, and the
``initialize`` answer of every client, are unchanged: a host reads a view by the URI a tool names.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from importlib.resources import files
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS
from pydantic import BaseModel

from gateway.envelope import Envelope
from gateway.executor.views import APP_TOOLS, CARD_TOOL, READ_TOOL, ViewCardArgs, ViewPath, ViewReadArgs
from gateway.mcp.extensions import declared_extension
from gateway.mcp.tasks import request_principal, tool_result
from gateway.tools.declarations import Mode, Tool

__all__ = ["CARD_VIEW", "READ_VIEW", "UI_EXTENSION", "VIEW_META", "VIEW_MIME", "McpApps", "view_policy"]

UI_EXTENSION = "io.modelcontextprotocol/ui"
VIEW_MIME = "text/html;profile=mcp-app"
VIEW_META = "io.countersign/view"
"""The ``_meta`` key of a result that holds what its view opens (a handle, a card id)."""
READ_VIEW = "ui://countersign/read-view.html"
CARD_VIEW = "ui://countersign/card-view.html"

_ASSETS = files("gateway.mcp") / "view_assets"
_PLACEHOLDER = re.compile(r"\{(csp|style|script)\}")
_NO_DOMAINS: Mapping[str, Any] = {"connectDomains": [], "resourceDomains": [], "frameDomains": [], "baseUriDomains": []}


def view_policy(script: str, style: str) -> str:
    """The Content-Security-Policy of a view whose one inline script and one inline style are these: nothing
    else runs or loads, and no request, frame, form or base URI is allowed."""
    return (
        "default-src 'none'; "
        f"script-src '{_digest(script)}'; style-src '{_digest(style)}'; "
        "img-src 'none'; connect-src 'none'; frame-src 'none'; font-src 'none'; media-src 'none'; "
        "object-src 'none'; base-uri 'none'; form-action 'none'"
    )


def _digest(source: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode()


def _document(page: str, script: str) -> str:
    """One view as a single HTML document: its page with the shared style and bridge, and its own script."""
    style = (_ASSETS / "view.css").read_text(encoding="utf-8")
    code = (_ASSETS / "bridge.js").read_text(encoding="utf-8") + "\n" + (_ASSETS / script).read_text(encoding="utf-8")
    parts = {"csp": view_policy(code, style), "style": style, "script": code}
    return _PLACEHOLDER.sub(lambda match: parts[match.group(1)], (_ASSETS / page).read_text(encoding="utf-8"))


def _app_tool(name: str, description: str, arguments: type[BaseModel]) -> types.Tool:
    """An app-only tool's listing: callable by a view, kept out of the model's tool list by the host."""
    return types.Tool(
        name=name,
        description=f"For Countersign's views (MCP Apps) only, not for the model. {description}",
        input_schema=arguments.model_json_schema(),
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
        _meta={"ui": {"visibility": ["app"]}},
    )


class McpApps:
    """The MCP Apps half of the MCP surface: views named in listings and results, their resources, and the
    app-only tools' calls handed to the view path."""

    def __init__(self, views: ViewPath, *, console_url: str | None) -> None:
        self._views = views
        # The card view's link to the console: the approvers' address as configured, never one built from the
        # request (a Host header says how this client reached /mcp, not where people approve). None: no link.
        self._console_url = console_url
        self._documents = {READ_VIEW: _document("read.html", "read.js"), CARD_VIEW: _document("card.html", "card.js")}
        self._app_tools = (
            _app_tool(
                READ_TOOL, "Open, once, what a read withheld from the agent, by its view's handle.", ViewReadArgs
            ),
            _app_tool(CARD_TOOL, "The caller's own approval card, as its view follows it.", ViewCardArgs),
        )

    def install(self, server: Server[Any]) -> None:
        """Serve the views as ``ui://`` resources on `server`."""
        server.add_request_handler("resources/read", types.ReadResourceRequestParams, self._read_resource)

    @staticmethod
    def declared(ctx: ServerRequestContext[Any, Any]) -> bool:
        """Whether the client of this request renders MCP Apps views (declared the extension and the HTML profile)."""
        settings = declared_extension(ctx, UI_EXTENSION)
        if settings is None:
            return False
        mime_types = settings.get("mimeTypes")
        return isinstance(mime_types, list) and VIEW_MIME in mime_types

    @staticmethod
    def is_app_only(name: str) -> bool:
        return name in APP_TOOLS

    @staticmethod
    def view_of(tool: Tool) -> str | None:
        """The view a tool's results open, if any."""
        if tool.mode is Mode.WRITE:
            return CARD_VIEW
        if tool.emits_untrusted_text and tool.human_view is not None:
            return READ_VIEW
        return None

    def app_tools(self) -> list[types.Tool]:
        """The app-only tools, as a client that renders views lists them: for its views, never its model."""
        return list(self._app_tools)

    def listed(self, definition: types.Tool, tool: Tool) -> types.Tool:
        """`definition` as a client that renders views lists it: naming its view, if it has one."""
        view = self.view_of(tool)
        if view is None:
            return definition
        return definition.model_copy(update={"meta": {**(definition.meta or {}), "ui": {"resourceUri": view}}})

    async def call_app_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """A call of an app-only tool, by a view (or by anything else, which is refused as an unknown tool)."""
        principal = request_principal(ctx)
        declared = self.declared(ctx)
        if params.name == READ_TOOL:
            return tool_result(await self._views.read(principal, params.arguments, declared=declared))
        if params.name == CARD_TOOL:
            envelope = await self._views.card(
                principal, params.arguments, declared=declared, console_url=self._console_url
            )
            return tool_result(envelope)
        raise ValueError(f"{params.name} is not an app-only tool")

    async def with_view(
        self,
        ctx: ServerRequestContext[Any, Any],
        tool: Tool | None,
        params: types.CallToolRequestParams,
        result: types.CallToolResult,
        envelope: Envelope,
    ) -> types.CallToolResult:
        """`result` as a client that renders views gets it: with what its view opens in ``_meta``."""
        if tool is None or not self.declared(ctx):
            return result
        view = self.view_of(tool)
        opens: dict[str, Any] | None = None
        if view == CARD_VIEW and envelope.card_id is not None:
            opens = {"card_id": envelope.card_id}
        elif view == READ_VIEW:
            opened = await self._views.open_read(request_principal(ctx), tool.name, params.arguments, envelope)
            if opened is not None:
                opens = {"handle": opened.handle, "expires_at": opened.expires_at}
        if opens is None:
            return result
        return result.model_copy(update={"meta": {**(result.meta or {}), VIEW_META: opens}})

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        document = self._documents.get(str(params.uri))
        if document is None:
            raise MCPError(INVALID_PARAMS, "Resource not found", data={"uri": str(params.uri)})
        content = types.TextResourceContents(
            uri=str(params.uri),
            mime_type=VIEW_MIME,
            text=document,
            _meta={"ui": {"csp": dict(_NO_DOMAINS), "prefersBorder": True}},
        )
        return types.ReadResourceResult(contents=[content])
