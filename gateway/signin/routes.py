"""The console's sign-in routes: to the provider and back, who is signed in, and sign-out.

Who calls it: the composition root adds `signin_routes(...)` beside the console. The routes:

* ``GET /admin/signin``: starts a sign-in (state, nonce, PKCE verifier kept in Redis for ten
  minutes; the state also in a short ``SameSite=Lax`` cookie, so the callback must come back to the
  browser that started it) and redirects to the provider.
* ``GET /admin/signin/callback``: the provider's redirect; the code is exchanged, the ID token
  checked (`gateway.signin.oidc`), a session opened (`gateway.store.console_sessions`) and its
  cookie set (`gateway.signin.cookies`); then on to the console. A refusal is a short page with one
  sentence, audited.
* ``GET /admin/session``: who the cookie's session is (and its CSRF token, which only this origin
  can read), or how this console can be signed in to: with the provider, and with a pasted admin
  key only in demo mode.
* ``POST /admin/signout``: ends the session (CSRF-checked like every change) and answers where the
  browser continues to end it at the provider too, when the provider can.

Without ``[console.oidc]`` only ``/admin/session`` is served (saying so), and nobody can sign in with a session.
"""

from __future__ import annotations

import secrets
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.audit.events import AuditEvent, AuditSink
from gateway.codes import Code
from gateway.errors import StoreUnavailableError
from gateway.limits.rate_limiter import AddressBudgets
from gateway.signin.cookies import CSRF_HEADER, CookiePolicy, session_cookie_of
from gateway.signin.oidc import OidcClient, pkce_pair
from gateway.store.console_sessions import SIGNIN_TTL_SECONDS, ConsoleSession, SessionStore, SignIn

__all__ = ["SIGNIN_COOKIE", "signin_routes"]

SIGNIN_COOKIE = "countersign_signin"
_NO_STORE = {"cache-control": "no-store"}


def _unavailable() -> Response:
    body = {"error": {"code": "LEDGER_UNAVAILABLE", "message": "The gateway cannot read sessions right now; retry."}}
    return JSONResponse(body, status_code=503, headers={**_NO_STORE, "retry-after": "1"})


def _not_configured() -> Response:
    return PlainTextResponse("Sign-in with a provider is not configured.", status_code=404, headers=_NO_STORE)


def _cannot_sign_in() -> Response:
    # The sign-in's own state, or the session it opens, could not be kept: nothing was half done.
    return PlainTextResponse("The gateway cannot sign you in right now; try again.", 503, headers=_NO_STORE)


def _signed_out(provider_logout: str | None, cookie: CookiePolicy) -> Response:
    """The session cookie cleared, and where the browser continues to end the session at the provider, if anywhere."""
    response = JSONResponse({"signed_out": True, "provider_logout": provider_logout}, headers=_NO_STORE)
    response.headers.append("set-cookie", cookie.clear())
    return response


class _SignIn:
    def __init__(
        self,
        *,
        client: OidcClient | None,
        sessions: SessionStore,
        cookie: CookiePolicy,
        idle_ms: int,
        absolute_ms: int,
        audit: AuditSink,
        demo: bool,
        floods: AddressBudgets,
    ) -> None:
        self.client = client
        self.sessions = sessions
        self.cookie = cookie
        self.idle_ms = idle_ms
        self.absolute_ms = absolute_ms
        self.audit = audit
        self.demo = demo
        self.floods = floods

    async def start(self, request: Request) -> Response:
        if self.client is None:
            return _not_configured()
        # Anyone may start a sign-in, and each start keeps state in Redis until it ends or expires: starts are
        # spent from the address's budget of unauthenticated requests, the one the auth edge spends failures from.
        address = request.client.host if request.client else "unknown"
        if not self.floods.spend(address):
            wait, first = self.floods.blocked(address)
            if first:
                await self.audit.record(
                    AuditEvent(
                        action="session.open",
                        outcome="deny",
                        code=Code.RATE_LIMITED.value,
                        reason=f"too many sign-ins started from {address}",
                    )
                )
            text = f"Too many sign-ins were started from your address; try again in {max(1, round(wait))} s."
            headers = {**_NO_STORE, "retry-after": str(max(1, round(wait)))}
            return PlainTextResponse(text, status_code=429, headers=headers)
        state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        verifier, challenge = pkce_pair()
        try:
            await self.sessions.begin_signin(state=state, signin=SignIn(verifier=verifier, nonce=nonce))
            target = await self.client.authorization_url(state=state, nonce=nonce, challenge=challenge)
        except StoreUnavailableError:
            return _cannot_sign_in()
        except (OSError, ValueError) as error:
            return await self._refused(f"the identity provider cannot be reached: {str(error)[:200]}", status=502)
        response = RedirectResponse(target, status_code=302, headers=_NO_STORE)
        # Lax, not Strict: the provider's redirect back is a navigation another site starts.
        response.set_cookie(
            SIGNIN_COOKIE,
            state,
            max_age=SIGNIN_TTL_SECONDS,
            path="/admin/signin",
            httponly=True,
            samesite="lax",
            secure=self.cookie.secure,
        )
        return response

    async def callback(self, request: Request) -> Response:
        if self.client is None:
            return _not_configured()
        state = request.query_params.get("state", "")
        if "error" in request.query_params:
            return await self._refused(f"the identity provider refused: {request.query_params['error'][:100]}")
        started = request.cookies.get(SIGNIN_COOKIE, "")
        if not state or not started or not secrets.compare_digest(state.encode(), started.encode()):
            return await self._refused("this sign-in was not started in this browser")
        try:
            signin = await self.sessions.take_signin(state)
        except StoreUnavailableError:
            return _cannot_sign_in()
        if signin is None:
            return await self._refused("this sign-in expired or was already used")
        code = request.query_params.get("code", "")
        if not code:
            return await self._refused("the identity provider sent no code")
        done = await self.client.finish(code=code, verifier=signin.verifier, nonce=signin.nonce)
        if done.principal is None:
            return await self._refused(done.reason)
        admin = done.principal
        try:
            token, session = await self.sessions.open(
                subject=admin.subject,
                org=admin.org,
                roles=admin.roles,
                idle_ms=self.idle_ms,
                absolute_ms=self.absolute_ms,
                id_token=done.id_token,
            )
        except StoreUnavailableError:
            return _cannot_sign_in()
        await self.audit.record(
            AuditEvent(
                action="session.open",
                outcome="ok",
                subject=admin.subject,
                org=admin.org,
                key_id=session.principal().key_id,
                extra={"via": "oidc"},
            )
        )
        response = RedirectResponse("/admin/", status_code=303, headers=_NO_STORE)
        response.headers.append("set-cookie", self.cookie.set(token, max_age_seconds=self.absolute_ms // 1000))
        response.delete_cookie(
            SIGNIN_COOKIE, path="/admin/signin", httponly=True, samesite="lax", secure=self.cookie.secure
        )
        return response

    async def whoami(self, request: Request) -> Response:
        try:
            _token, session = await self._cookie_session(request)
        except StoreUnavailableError:
            return _unavailable()
        ways = {"provider": self.client is not None, "admin_key": self.demo}
        if session is None:
            return JSONResponse({"signed_in": False, "sign_in": ways}, headers=_NO_STORE)
        return JSONResponse(
            {
                "signed_in": True,
                "subject": session.subject,
                "org": session.org,
                "roles": sorted(session.roles),
                "csrf": session.csrf,
                "ends_ms": session.ends_ms,
                "idle_minutes": self.idle_ms / 60_000,
                "sign_in": ways,
            },
            headers=_NO_STORE,
        )

    async def signout(self, request: Request) -> Response:
        try:
            token, live = await self._cookie_session(request)
        except StoreUnavailableError:
            return _unavailable()
        if token is None or live is None:
            return _signed_out(None, self.cookie)
        origin = request.headers.get("origin")
        sent = request.headers.get(CSRF_HEADER, "")
        if (origin is not None and origin != self.cookie.origin) or not secrets.compare_digest(
            sent.encode(), live.csrf.encode()
        ):
            message = "This sign-out lacked the console's CSRF token and was refused; reload the console."
            who = live.principal()
            await self.audit.record(AuditEvent.refusal(who, "session.close", Code.CSRF_REFUSED.value, message))
            return JSONResponse(
                {"error": {"code": Code.CSRF_REFUSED.value, "message": message}}, 403, headers=_NO_STORE
            )
        session = await self.sessions.end(token)
        provider = None
        if session is not None:
            who = session.principal()
            await self.audit.record(
                AuditEvent(action="session.close", outcome="ok", subject=who.subject, org=who.org, key_id=who.key_id)
            )
            if self.client is not None:
                try:
                    provider = await self.client.end_session_url(
                        id_token=session.id_token, after=f"{self.cookie.origin}/admin/"
                    )
                except (OSError, ValueError):
                    provider = None
        return _signed_out(provider, self.cookie)

    async def _cookie_session(self, request: Request) -> tuple[str | None, ConsoleSession | None]:
        """The session cookie's token, and the live session it names (None without a cookie, or when it names none).

        Raises:
            StoreUnavailableError: sessions cannot be read now.
        """
        token = session_cookie_of(request.scope, self.cookie.name)
        return token, (await self.sessions.resolve(token, idle_ms=self.idle_ms) if token else None)

    async def _refused(self, reason: str, *, status: int = 400) -> Response:
        await self.audit.record(
            AuditEvent(action="session.open", outcome="deny", code=Code.UNAUTHENTICATED.value, reason=reason[:300])
        )
        text = f"Sign-in refused: {reason}. Start again from the console: /admin/?{urlencode({'signin': 'failed'})}"
        return PlainTextResponse(text, status_code=status, headers=_NO_STORE)


def signin_routes(
    *,
    client: OidcClient | None,
    sessions: SessionStore,
    cookie: CookiePolicy,
    idle_ms: int,
    absolute_ms: int,
    audit: AuditSink,
    demo: bool,
    floods: AddressBudgets,
) -> list[BaseRoute]:
    """``/admin/signin``, its callback, ``/admin/session`` and ``/admin/signout`` (see the module docstring)."""
    signin = _SignIn(
        client=client,
        sessions=sessions,
        cookie=cookie,
        idle_ms=idle_ms,
        absolute_ms=absolute_ms,
        audit=audit,
        demo=demo,
        floods=floods,
    )
    return [
        Route("/admin/signin", signin.start, methods=["GET"]),
        Route("/admin/signin/callback", signin.callback, methods=["GET"]),
        Route("/admin/session", signin.whoami, methods=["GET"]),
        Route("/admin/signout", signin.signout, methods=["POST"]),
    ]
