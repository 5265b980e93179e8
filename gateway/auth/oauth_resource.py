"""The gateway as an OAuth protected resource: its metadata documents and its scope challenge.

`protected_resource_routes(config)` serves RFC 9728's metadata: ``/.well-known/oauth-protected-resource``
(the MCP endpoint's) and the path-suffixed form of each configured resource
(``/.well-known/oauth-protected-resource/mcp``, and the admin API's when it takes tokens), each
naming the resource, the issuers whose tokens open it, and the scopes tools require. An MCP
client finds them from the ``resource_metadata`` of `gateway.auth.bearer.BearerAuth`'s 401.

`jwks_route` publishes the gateway's own public keys (`gateway.signing.signer`), with which backends verify
the identity tokens and approval receipts it sends them.

`ScopeChecks` is a layer of the ``/mcp`` stack behind authentication and the edge's body checks, so
the body it reads is already bounded (`gateway.mcp.stack`): a ``tools/call`` by a token's principal
for a tool whose scopes (`OAuthSection.tool_scopes`) the token lacks is 403 (a JSON-RPC error) with
``error="insufficient_scope"`` and the scopes needed, and is audited as ``auth.scope``. An API key is
not scope-limited (its `Principal.scopes` is None), and a tool no pattern names needs no scope; until
the configuration names an issuer, no surface takes tokens at all.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.audit.events import AuditEvent, AuditSink
from gateway.auth.bearer import caller_of, jsonrpc_refusal
from gateway.codes import Code
from gateway.config.oauth import OAuthSection, Surface, metadata_url
from gateway.errors import StoreUnavailableError
from gateway.signing.signer import Signer
from gateway.web.asgi_replay import replay_body

__all__ = ["JWKS_PATH", "ScopeChecks", "jwks_route", "protected_resource_routes"]

_ROOT = "/.well-known/oauth-protected-resource"


def protected_resource_routes(config: OAuthSection) -> list[BaseRoute]:
    """The metadata routes of every configured resource; none when no issuer is configured."""
    if not config.issuers:
        return []
    documents: dict[str, dict[str, object]] = {}
    resources: tuple[tuple[Surface, str | None], ...] = (("mcp", config.resource), ("admin", config.admin_resource))
    for surface, resource in resources:
        if resource is not None and config.issuers_for(surface):
            documents[urlsplit(metadata_url(resource)).path] = _document(config, resource, surface)
    if config.resource is not None and config.issuers_for("mcp"):
        documents.setdefault(_ROOT, documents[urlsplit(metadata_url(config.resource)).path])

    def route(path: str, document: dict[str, object]) -> Route:
        async def endpoint(request: Request) -> JSONResponse:
            return JSONResponse(document, headers={"cache-control": "public, max-age=300"})

        return Route(path, endpoint, methods=["GET"])

    return [route(path, document) for path, document in documents.items()]


JWKS_PATH = "/.well-known/jwks.json"


def jwks_route(signer: Signer) -> Route:
    """``GET /.well-known/jwks.json``: the public keys backends verify identity tokens and approval
    receipts with (the active key and every key still in its overlap); 503 when Redis does not answer."""

    async def endpoint(request: Request) -> JSONResponse:
        try:
            document = await signer.jwks()
        except StoreUnavailableError:
            return JSONResponse({"error": "unavailable"}, 503, headers={"retry-after": "1"})
        # A backend may cache it this long: shorter than the overlap a rotated-out key is kept for.
        return JSONResponse(document, headers={"cache-control": "public, max-age=60"})

    return Route(JWKS_PATH, endpoint, methods=["GET"])


def _document(config: OAuthSection, resource: str, surface: Surface) -> dict[str, object]:
    document: dict[str, object] = {
        "resource": resource,
        "authorization_servers": config.issuers_for(surface),
        "bearer_methods_supported": ["header"],
        "resource_name": "Countersign" if surface == "mcp" else "Countersign admin API",
    }
    if surface == "mcp":
        document["scopes_supported"] = sorted({scope for scopes in config.tool_scopes.values() for scope in scopes})
    return document


class ScopeChecks:
    """403 ``insufficient_scope`` for a token's ``tools/call`` of a tool that needs scopes it lacks."""

    def __init__(self, app: ASGIApp, *, config: OAuthSection, audit: AuditSink) -> None:
        self.app = app
        self._config = config
        self._audit = audit
        resource = config.resource
        self._metadata = f', resource_metadata="{metadata_url(resource)}"' if resource is not None else ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal = caller_of(scope)
        if scope["type"] != "http" or scope["method"] != "POST" or principal is None or principal.scopes is None:
            await self.app(scope, receive, send)
            return
        body = await _body(receive)
        tool = _called_tool(body) if b"tools/call" in body else None
        missing = sorted(self._config.scopes_for(tool) - principal.scopes) if tool is not None else []
        if tool is not None and missing:
            needed = " ".join(sorted(self._config.scopes_for(tool)))
            extra = {"tool": tool, "acting_client": principal.acting_client}
            reason = f"token lacks scope {' '.join(missing)}"
            await self._audit.record(AuditEvent.refusal(principal, "auth.scope", Code.PERMISSION_DENIED, reason, extra))
            header = f'Bearer realm="mcp", error="insufficient_scope", scope="{needed}"{self._metadata}'
            # A JSON-RPC error, as every refusal on /mcp is (`gateway.auth.bearer.jsonrpc_refusal`); the
            # challenge keeps RFC 6750's insufficient_scope for a client that steps up its token.
            sentence = f"Your token may not call {tool}: it needs the scope {needed}; ask for a token that has it."
            details = {"error": "insufficient_scope", "tool": tool, "scope": needed}
            payload = jsonrpc_refusal(403, Code.PERMISSION_DENIED, sentence, details)
            await send(
                {
                    "type": "http.response.start",
                    "status": 403,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(payload)).encode()),
                        (b"www-authenticate", header.encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": payload})
            return
        await self.app(scope, replay_body(body, receive), send)


def _called_tool(body: bytes) -> str | None:
    try:
        message = json.loads(body)
    except ValueError:
        return None  # the SDK answers a body that is not JSON
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return None
    params = message.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    return name if isinstance(name, str) else None


async def _body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)
