"""The console's session cookie, and the check every request that carries it passes (ASGI middleware).

Who uses it: the composition root wraps the admin API in `SessionAuth`, in front of `BearerAuth`:
a request with an ``Authorization`` header goes to the bearer check as before (scripts, the CLI's
peers, a pasted key in demo mode); a request with the session cookie and no such header is the
console of a signed-in approver. This module knows nothing of cards.

The cookie is ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (a browser never sends it with
a request another site started), ``Path=/admin``, and ``Secure`` with the ``__Host-`` prefix on any
origin but plain-HTTP loopback. Beyond SameSite, every state-changing request (any method but
GET, HEAD and OPTIONS) must carry the session's CSRF token in ``X-CSRF-Token``, and an ``Origin``
or ``Sec-Fetch-Site`` header, when the browser sends one, must name the console's own origin; a
request that fails either is refused with CSRF_REFUSED (403) before the API sees it, and audited.
A cookie whose session ended (idle, absolute end, signed out, revoked) is 401, audited.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from http.cookies import SimpleCookie
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.audit.events import AuditEvent, AuditSink
from gateway.auth.bearer import PRINCIPAL_SCOPE_KEY, send_payload
from gateway.codes import Code
from gateway.errors import StoreUnavailableError
from gateway.store.console_sessions import ConsoleSession, SessionStore

__all__ = ["CSRF_HEADER", "SAFE_METHODS", "SESSION_SCOPE_KEY", "CookiePolicy", "SessionAuth", "session_cookie_of"]

CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SESSION_SCOPE_KEY = "countersign.session"


class CookiePolicy:
    """The cookie's name and attributes for the console at `origin` (``scheme://host[:port]``)."""

    def __init__(self, origin: str) -> None:
        parts = urlsplit(origin)
        self.origin = origin
        loopback = parts.hostname in ("127.0.0.1", "localhost", "::1")
        self.secure = parts.scheme == "https" or not loopback
        # __Host- makes the browser refuse the cookie unless Secure, Path=/ and no Domain: no subdomain can set it.
        self.name = "__Host-countersign_session" if self.secure else "countersign_session"
        self.path = "/" if self.secure else "/admin"

    def set(self, token: str, *, max_age_seconds: int) -> str:
        return self._header(token, max_age_seconds)

    def clear(self) -> str:
        return self._header("", 0)

    def _header(self, value: str, max_age: int) -> str:
        attributes = [f"{self.name}={value}", f"Path={self.path}", f"Max-Age={max_age}", "HttpOnly", "SameSite=Strict"]
        if self.secure:
            attributes.append("Secure")
        return "; ".join(attributes)


def session_cookie_of(scope: Scope, name: str) -> str | None:
    """The value of the cookie `name` in the request, or None."""
    for header, value in scope["headers"]:
        if header == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(bytes(value).decode("latin-1"))
            except Exception:  # a malformed Cookie header is no session  # noqa: BLE001
                return None
            morsel = jar.get(name)
            if morsel is not None and morsel.value:
                return morsel.value
    return None


def _header(scope: Scope, name: bytes) -> str | None:
    for header, value in scope["headers"]:
        if header == name:
            return bytes(value).decode("latin-1")
    return None


class SessionAuth:
    """Admit a request carrying a live session's cookie (and, to change anything, its CSRF token) as its admin;
    hand every other request to `fallback` (the bearer check)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        fallback: ASGIApp,
        sessions: SessionStore,
        cookie: CookiePolicy,
        idle_ms: int,
        audit: AuditSink,
    ) -> None:
        self.app = app
        self._fallback = fallback
        self._sessions = sessions
        self._cookie = cookie
        self._idle_ms = idle_ms
        self._audit = audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _header(scope, b"authorization") is not None:
            await self._fallback(scope, receive, send)
            return
        token = session_cookie_of(scope, self._cookie.name)
        if token is None:
            await self._fallback(scope, receive, send)
            return
        try:
            session = await self._sessions.resolve(token, idle_ms=self._idle_ms)
        except StoreUnavailableError:
            await _send(send, 503, {"error": "unavailable", "error_description": "session store unavailable"})
            return
        if session is None:
            await self._refuse(scope, send, 401, Code.UNAUTHENTICATED, "Your console session ended; sign in again.")
            return
        if scope["method"] not in SAFE_METHODS:
            problem = self._cross_site(scope, session)
            if problem:
                await self._refuse(scope, send, 403, Code.CSRF_REFUSED, problem, session)
                return
        scope[PRINCIPAL_SCOPE_KEY] = session.principal()
        scope[SESSION_SCOPE_KEY] = session
        await self.app(scope, receive, send)

    def _cross_site(self, scope: Scope, session: ConsoleSession) -> str:
        origin = _header(scope, b"origin")
        if origin is not None and origin != self._cookie.origin:
            return "This request came from another site and was refused; use the console."
        fetch_site = _header(scope, b"sec-fetch-site")
        if fetch_site is not None and fetch_site not in ("same-origin", "none"):
            return "This request came from another site and was refused; use the console."
        sent = _header(scope, CSRF_HEADER.encode())
        if sent is None or not secrets.compare_digest(sent.encode(), session.csrf.encode()):
            return "This request lacked the console's CSRF token and was refused; reload the console and try again."
        return ""

    async def _refuse(
        self, scope: Scope, send: Send, status: int, code: Code, message: str, session: ConsoleSession | None = None
    ) -> None:
        who = session.principal() if session is not None else None
        await self._audit.record(
            AuditEvent(
                action="session.reject",
                outcome="deny",
                subject=who.subject if who else "",
                org=who.org if who else "",
                key_id=who.key_id if who else "",
                code=code.value,
                reason=message,
                extra={"path": str(scope.get("path", ""))[:200], "method": str(scope.get("method", ""))},
            )
        )
        body = {"error": {"code": code.value, "message": message}}
        headers = [(b"set-cookie", self._cookie.clear().encode())] if status == 401 else []
        await _send(send, status, body, headers)


async def _send(
    send: Send, status: int, body: Mapping[str, object], headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send_payload(send, status, json.dumps(body).encode(), [(b"cache-control", b"no-store"), *(headers or [])])
