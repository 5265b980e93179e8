"""The ``/mcp`` endpoint: every layer between the HTTP request and the MCP SDK, assembled here and only here.

Who calls it: the composition root (`gateway.runtime.app.create_app`), which routes ``/mcp`` to what
`mcp_endpoint` returns. It builds, outermost first::

    HeaderChecks(                 gateway.mcp.edge: a foreign Host or Origin, a repeated single header, Mcp-* padding
      BearerAuth(                 gateway.auth.bearer: an agent key or an OAuth token becomes the Principal
        MessageChecks(            gateway.mcp.edge: the body cap, ids and batches, dead session ids on refusals
          ScopeChecks(            gateway.auth.oauth_resource: a token's tools/call needs the tool's scopes
            BudgetFront(          gateway.mcp.budget_front: a call its spent budget refuses never reaches the SDK
              StreamableHTTPASGIApp(KeyedSessionManager))))))   the SDK, sessions per key (gateway.mcp.sessions)

Why in this order:

* the header checks come first, so a request they refuse is never authenticated and costs no key
  lookup (nor a Redis round trip);
* authentication comes next: every layer behind it knows the caller, and audits its refusals with it;
* the body checks come right after it: the body is read and bounded once, for an authenticated
  caller, before any later layer reads it;
* the scope checks read that bounded body; for an API key (never scope-limited) they pass at once;
* the budget front stands directly before the SDK and answers exactly what the SDK would answer
  for the call, so it needs the caller and a body every earlier layer has admitted.

Around this endpoint, as around every route, the root app puts `HttpTelemetry` (the access log) and
serves ``/mcp`` without Starlette's routing and exception layers (`gateway.web.root_app`). The other
modules of the edge describe their own layer and point here for the stack.
"""

from __future__ import annotations

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp

from gateway.audit.events import AuditSink
from gateway.auth.bearer import BearerAuth
from gateway.auth.oauth_resource import ScopeChecks
from gateway.auth.tokens import TokenVerifier
from gateway.limits.rate_limiter import AddressBudgets
from gateway.mcp.budget_front import BudgetFront
from gateway.mcp.edge import HeaderChecks, MessageChecks
from gateway.mcp.surface import McpSurface
from gateway.principal import KeyKind
from gateway.store.keys import KeyCache

__all__ = ["mcp_endpoint"]


def mcp_endpoint(
    surface: McpSurface,
    *,
    keys: KeyCache,
    tokens: TokenVerifier,
    floods: AddressBudgets,
    audit: AuditSink,
    allowed_hosts: list[str],
    allowed_origins: list[str],
) -> HeaderChecks:
    """The ASGI endpoint of ``/mcp``: `surface`'s SDK app behind the layers of the module docstring.

    `keys` resolves agent keys, `tokens` verifies OAuth tokens (and holds the scopes tools need),
    `floods` is the process's table of failed authentications per client address, shared with the
    other surfaces.

    Raises:
        ValueError: `allowed_hosts` is empty (`HeaderChecks` would refuse every request).
    """
    return HeaderChecks(
        BearerAuth(
            MessageChecks(
                ScopeChecks(
                    BudgetFront(
                        StreamableHTTPASGIApp(surface.session_manager),
                        server=surface.server,
                        held=surface.held_refusal,
                        input_schema=surface.listed_schema,
                        audit=surface.flood_audit,
                    ),
                    config=tokens.config,
                    audit=audit,
                ),
                audit=audit,
            ),
            keys=keys,
            kind=KeyKind.AGENT,
            audit=audit,
            realm="mcp",
            floods=floods,
            tokens=tokens,
        ),
        audit=audit,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
    )
