"""Bearer-key authentication for the HTTP surfaces (ASGI middleware).

It resolves ``Authorization: Bearer <key>`` to a `Principal` of the expected kind and stores it
in the ASGI scope under `PRINCIPAL_SCOPE_KEY`. Anything else gets 401 with
``WWW-Authenticate: Bearer`` before the wrapped app sees the request. The token goes no
further than this module: the scope carries the principal, which has no token field. Its own
answers (401, 429 to a flood, and 503 when the key store cannot answer) carry a `BearerRefusal`
body; a route table mounted behind it documents them with `BEARER_ANSWERS`. On the agents' surface
(``/mcp``) the same answers are JSON-RPC error objects instead (`jsonrpc_refusal`), with the HTTP
status and ``WWW-Authenticate`` kept: an MCP client (SDK 2.x) shows the ``error.message`` of a
non-2xx JSON-RPC body and only "Server returned an error response" for any other body, so the reason
reached no agent. The message says why in one sentence, and never whether a key exists: an unknown,
a revoked and a wrong-kind key read the same.

Beside API keys it takes OAuth access tokens when given a `TokenVerifier` whose configuration
names this surface's resource: a credential shaped like a JWT (`looks_like_jwt`; an API key starts
``csk_``) goes to the verifier, everything else to the key store. Then every challenge names the
protected-resource metadata (``resource_metadata``, RFC 9728), and one to a request that presented
no credential has no ``error`` code (RFC 6750 section 3.1). A refused token spends from the
flood budget below like a refused key.

Floods of unauthenticated requests: each failed authentication (no key, or one that does not
resolve to a live key of the right kind) spends from its client address's budget
(``[limits] unauthenticated``), and an address whose budget is spent gets 429 with
``Retry-After`` *before* any key lookup, whatever key it sends, until the budget refills. Only
failures count: good keys behind one address (a NAT, an office) spend their principals' own
budgets in the executor, not this one, and a credential this process admitted from an address in
the last hour still passes while that address is blocked (`AddressBudgets.vouched`), so one broken
client behind a NAT does not lock out its neighbours. The budgets are kept in process (`AddressBudgets`,
bounded), not in Redis, so a flood costs no Redis round trip at all; the price is that each
gateway process allows the budget on its own. The first 429 of a lockout is audited, not each
one: auditing every refused request would put the flood back on Redis. Behind a reverse proxy
the client address is the proxy's unless uvicorn is told to trust its forwarded headers
(``--proxy-headers --forwarded-allow-ips``).

When Redis is gone no request is served, reads included (ARCHITECTURE invariant 7): a caller that
cannot be authenticated gets 503 with ``Retry-After`` at once, never a guess. A key still held by
the agents' `KeyCache` (for at most its TTL) passes here, and its call is then refused by the
executor, which serves nothing it cannot audit.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping
from typing import Any, Literal

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from pydantic import BaseModel, ConfigDict
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.audit.events import AuditEvent, AuditSink
from gateway.auth.tokens import TokenVerifier, looks_like_jwt
from gateway.codes import Code
from gateway.config.oauth import Surface, metadata_url
from gateway.errors import StoreUnavailableError
from gateway.limits.rate_limiter import AddressBudgets
from gateway.principal import KeyKind, Principal
from gateway.store.keys import KeyCache, KeyStore
from gateway.telemetry.log_context import bind_key_id
from gateway.web.route_table import Answer

__all__ = [
    "AUTH_ERROR",
    "BEARER_ANSWERS",
    "PRINCIPAL_SCOPE_KEY",
    "STORE_RETRY_AFTER_SECONDS",
    "BearerAuth",
    "BearerRefusal",
    "jsonrpc_refusal",
    "principal_of",
]

logger = logging.getLogger(__name__)

PRINCIPAL_SCOPE_KEY = "countersign.principal"

AUTH_ERROR = -32001
"""The JSON-RPC code of an authentication or authorization refusal on ``/mcp`` (implementation-defined,
-32000..-32019 in the MCP allocation; the session quota is -32010)."""


class BearerRefusal(BaseModel):
    """A request `BearerAuth` answered itself, in the style of RFC 6750's bearer-token errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    error: Literal["invalid_token", "rate_limited", "unavailable"]
    error_description: str


BEARER_ANSWERS: dict[int, Answer] = {
    401: Answer(description="missing, unknown, revoked or wrong-kind key, or an invalid token", model=BearerRefusal),
    429: Answer(description="too many failed authentications from this address (see Retry-After)", model=BearerRefusal),
    503: Answer(description="the key store cannot answer (retry)", model=BearerRefusal),
}
"""What `BearerAuth` answers before the wrapped app sees the request."""


def caller_of(scope: Mapping[str, Any]) -> Principal | None:
    """The principal `BearerAuth` stored for this request, or None before (or without) authentication."""
    principal = scope.get(PRINCIPAL_SCOPE_KEY)
    return principal if isinstance(principal, Principal) else None


def principal_of(scope: Scope) -> Principal:
    """The principal `BearerAuth` stored for this request.

    Raises:
        LookupError: when the request did not pass through `BearerAuth` (a wiring bug).
    """
    principal = scope.get(PRINCIPAL_SCOPE_KEY)
    if not isinstance(principal, Principal):
        raise LookupError("request was not authenticated by BearerAuth")
    return principal


_MISSING = "missing bearer token"
REVOKED_SUBJECT = "the token's subject is revoked"

_SENTENCES: dict[str, str] = {
    _MISSING: "Send your agent key as an Authorization: Bearer header; this request had none.",
    "unknown, revoked or wrong-kind key": (
        "The bearer key was refused (unknown, revoked, or not an agent key): ask the gateway's administrator "
        "for a valid agent key."
    ),
    REVOKED_SUBJECT: "The person this token is about has been revoked at this gateway; ask its administrator.",
}
"""What a model or a person reads first on ``/mcp``, by reason; a token's own reason is appended as is."""


def jsonrpc_refusal(status: int, code: Code, message: str, data: Mapping[str, Any]) -> bytes:
    """The body of an HTTP refusal on ``/mcp``: a JSON-RPC error (no id: the request was not read) whose
    ``message`` is the one sentence to act on and whose ``data`` carries the stable `code`, the HTTP
    status, whether retrying can help, and the structured details."""
    error = {
        "code": AUTH_ERROR,
        "message": message,
        "data": {"code": code.value, "status": status, "retryable": code.retryable, **data},
    }
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}, separators=(",", ":")).encode()


_SURFACES: dict[KeyKind, Surface] = {KeyKind.AGENT: "mcp", KeyKind.ADMIN: "admin"}

STORE_RETRY_AFTER_SECONDS = 1
"""``Retry-After`` of the 503 a caller gets while the key store cannot answer: the Redis timeouts are
well under a second and a reconnect is automatic, so the next try a second later is likely to pass."""


class BearerAuth:
    """Admit requests carrying a live key of `kind`; answer 401 to everything else, and 429 to an
    address whose failed-authentication budget (`floods`, shared by the surfaces of a process) is spent."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        keys: KeyStore | KeyCache,
        kind: KeyKind,
        audit: AuditSink,
        realm: str,
        floods: AddressBudgets,
        tokens: TokenVerifier | None = None,
    ) -> None:
        self.app = app  # public, as in Starlette's middleware, so the routes behind it can be walked
        self._keys = keys
        self._floods = floods
        self._kind = kind
        self._audit = audit
        self._realm = realm
        self._users: dict[Principal, AuthenticatedUser] = {}
        # Tokens open the surface whose resource is their audience: agents' /mcp, admins' API.
        self._surface = _SURFACES.get(kind)
        # Agents' keys open /mcp only, whose clients read JSON-RPC error objects, not RFC 6750 bodies.
        self._jsonrpc = kind is KeyKind.AGENT
        minted_for = tokens is not None and self._surface is not None and tokens.config.issuers_for(self._surface)
        resource = tokens.audience(self._surface) if tokens is not None and self._surface and minted_for else None
        self._tokens = tokens if resource is not None else None
        self._challenge = f'Bearer realm="{realm}"' + (
            f', resource_metadata="{metadata_url(resource)}"' if resource is not None else ""
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        address = _address(scope)
        token = _bearer(scope)
        wait, first = self._floods.blocked(address)
        if wait > 0 and not (token is not None and self._floods.vouched(address, _digest(token))):
            await self._throttle(scope, send, address, wait, audit=first)
            return
        if token is None:
            self._floods.spend(address)
            await self._reject(scope, send, _MISSING, audit=False)
            return
        if self._tokens is not None and self._surface is not None and looks_like_jwt(token):
            verdict = await self._tokens.verify(token, self._surface)
            reason, verified = verdict.reason, verdict.principal
            try:
                # A token is about a person, whom an operator can revoke as a whole (`KeyStore.revoke_subject`):
                # the issuer goes on minting tokens for them, and this is where they stop working.
                if verified is not None and await self._keys.subject_revoked(verified.org, verified.subject):
                    reason, verified = REVOKED_SUBJECT, None
            except StoreUnavailableError as error:
                await self._unavailable(send, error)
                return
            if verified is None:
                self._refused(address, token)
                await self._reject(scope, send, reason, audit=True, issuer=verdict.issuer)
                return
            self._floods.vouch(address, _digest(token))
            await self._admit(verified, scope, receive, send)
            return
        try:
            principal = await self._keys.resolve(token)
        except StoreUnavailableError as error:
            await self._unavailable(send, error)
            return
        if principal is None or principal.kind is not self._kind:
            self._refused(address, token)
            await self._reject(scope, send, "unknown, revoked or wrong-kind key", audit=True)
            return
        self._floods.vouch(address, _digest(token))
        await self._admit(principal, scope, receive, send)

    async def _unavailable(self, send: Send, error: StoreUnavailableError) -> None:
        logger.error("key store unavailable: %s", error.cause)
        refusal = BearerRefusal(error="unavailable", error_description="key store unavailable")
        retry = [(b"retry-after", str(STORE_RETRY_AFTER_SECONDS).encode())]
        if self._jsonrpc:
            wait = STORE_RETRY_AFTER_SECONDS
            sentence = f"The gateway cannot check keys right now; retry in {wait} s."
            body = jsonrpc_refusal(503, Code.LEDGER_UNAVAILABLE, sentence, {"retry_after": wait})
            await _send_bytes(send, 503, body, retry)
            return
        await _send_json(send, 503, refusal, retry)

    def _refused(self, address: str, token: str) -> None:
        self._floods.spend(address)
        self._floods.forget(address, _digest(token))

    async def _admit(self, principal: Principal, scope: Scope, receive: Receive, send: Send) -> None:
        scope[PRINCIPAL_SCOPE_KEY] = principal
        bind_key_id(principal.key_id)  # log records of this request name its key id (never the token)
        scope["user"] = self._user(principal)
        await self.app(scope, receive, send)

    def _user(self, principal: Principal) -> AuthenticatedUser:
        """The SDK binds stateful MCP sessions to the credential that opened them through this user.

        It carries the key id, never the token. Built once per principal: it is a pydantic model,
        and building it on every request was a measurable part of the read path.
        """
        user = self._users.get(principal)
        if user is None:
            if len(self._users) >= 10_000:
                self._users.clear()
            token = AccessToken(
                token="", client_id=principal.key_id, scopes=sorted(principal.roles), subject=principal.subject
            )
            user = self._users[principal] = AuthenticatedUser(token)
        return user

    async def _reject(self, scope: Scope, send: Send, reason: str, *, audit: bool, issuer: str = "") -> None:
        if audit:
            where = {"surface": self._realm, "path": str(scope.get("path", ""))}
            await self._audit.record(
                AuditEvent(
                    action="auth.reject",
                    outcome="deny",
                    code=Code.UNAUTHENTICATED.value,
                    reason=reason,
                    extra={**where, "issuer": issuer} if issuer else where,
                )
            )
        # RFC 6750 section 3.1: a request that presented no credential gets the challenge without an error code.
        header = (
            self._challenge
            if reason == _MISSING
            else (f'{self._challenge}, error="invalid_token", error_description="{reason}"')
        )
        challenge = [(b"www-authenticate", header.encode())]
        if self._jsonrpc:
            sentence = _SENTENCES.get(reason) or f"The bearer token was refused: {reason}."
            body = jsonrpc_refusal(401, Code.UNAUTHENTICATED, sentence, {"reason": reason})
            await _send_bytes(send, 401, body, challenge)
            return
        refusal = BearerRefusal(error="invalid_token", error_description=reason)
        await _send_json(send, 401, refusal, challenge)

    async def _throttle(self, scope: Scope, send: Send, address: str, wait: float, *, audit: bool) -> None:
        if audit:
            logger.warning(
                "too many failed authentications from %s on %s; refusing for %g s", address, self._realm, wait
            )
            await self._audit.record(
                AuditEvent(
                    action="auth.throttle",
                    outcome="deny",
                    code="RATE_LIMITED",
                    reason=f"failed-authentication budget of the address spent; retry after {wait:g} s",
                    extra={"surface": self._realm, "path": str(scope.get("path", "")), "client": address},
                )
            )
        retry = [(b"retry-after", str(math.ceil(wait)).encode())]
        if self._jsonrpc:
            seconds = math.ceil(wait)
            sentence = f"Too many failed authentications from this address; retry in {seconds} s with a valid key."
            body = jsonrpc_refusal(429, Code.RATE_LIMITED, sentence, {"retry_after": seconds})
            await _send_bytes(send, 429, body, retry)
            return
        refusal = BearerRefusal(error="rate_limited", error_description="too many failed authentications")
        await _send_json(send, 429, refusal, retry)


def _digest(token: str) -> bytes:
    """What the flood table remembers of a credential: a digest, never the token itself."""
    return hashlib.blake2b(token.encode(), digest_size=16).digest()


def _address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def _bearer(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = bytes(value).decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


async def _send_json(send: Send, status: int, body: BearerRefusal, headers: list[tuple[bytes, bytes]]) -> None:
    await _send_bytes(send, status, json.dumps(body.model_dump(mode="json")).encode(), headers)


async def _send_bytes(send: Send, status: int, payload: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
