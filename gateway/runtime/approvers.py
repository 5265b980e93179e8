"""The parts that make an approver a signed-in person: console sessions, the OpenID client, passkeys.

Who calls it: `create_app` (the console's sign-in routes, the session check in front of the admin
API, the passkey routes and the card service's passkey check). Built from the settings only here; the
passkey service alone, which the CLI needs too, in `gateway.runtime.passkeys`.

The console's address (``[notifications] console_url``) is the passkeys' relying party and the
session cookie's origin.
A sign-in configuration whose console address is plain HTTP beyond loopback is refused: the
session cookie would travel in clear text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from starlette.routing import BaseRoute
from starlette.types import ASGIApp

from gateway.admin.api import PREFIX
from gateway.admin.passkeys import passkey_table
from gateway.audit.events import AuditSink
from gateway.config.console import console_origin
from gateway.config.settings import Settings
from gateway.errors import ConfigError
from gateway.limits.rate_limiter import AddressBudgets
from gateway.passkeys.service import PasskeyService
from gateway.runtime.passkeys import passkey_service
from gateway.signin.cookies import CookiePolicy, SessionAuth
from gateway.signin.oidc import OidcClient
from gateway.signin.routes import signin_routes
from gateway.store.client import Connection
from gateway.store.console_sessions import SessionStore
from gateway.web.route_table import RouteTable

__all__ = ["Approvers", "approvers"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Approvers:
    passkeys: PasskeyService
    sessions: SessionStore
    passkey_routes: RouteTable
    """The admin API's passkey routes (`gateway.admin.passkeys`)."""
    guard: Callable[[ASGIApp, ASGIApp], ASGIApp]
    """Wraps the admin API (and its bearer check) in the session check (`SessionAuth`)."""
    routes: list[BaseRoute]
    """The console's sign-in routes (`gateway.signin.routes`)."""


def approvers(settings: Settings, redis: Connection, audit: AuditSink, floods: AddressBudgets) -> Approvers:
    """Everything the console's sign-in and the passkeys need, from the settings.

    Raises:
        ConfigError: ``[console.oidc]`` with a console address in plain HTTP beyond loopback.
    """
    origin = console_origin(settings.notifications.console_url)
    cookie = CookiePolicy(origin)
    console = settings.console
    if console.oidc is not None and cookie.secure and not origin.startswith("https://"):
        raise ConfigError(
            f"[notifications] console_url {origin}: approvers sign in over it, so it must be https:// "
            "(http only on loopback)"
        )
    sessions = SessionStore(redis.client)
    client_secret = settings.console_client_secret.__str__() if settings.console_client_secret is not None else None
    oidc = (
        OidcClient(console.oidc, client_secret=client_secret, redirect_uri=f"{origin}/admin/signin/callback")
        if console.oidc is not None
        else None
    )
    passkeys = passkey_service(settings, redis, audit)

    def guard(app: ASGIApp, bearer: ASGIApp) -> ASGIApp:
        return SessionAuth(app, fallback=bearer, sessions=sessions, cookie=cookie, idle_ms=console.idle_ms, audit=audit)

    routes = signin_routes(
        client=oidc,
        sessions=sessions,
        cookie=cookie,
        idle_ms=console.idle_ms,
        absolute_ms=console.absolute_ms,
        audit=audit,
        demo=settings.demo,
        floods=floods,
    )
    return Approvers(
        passkeys=passkeys,
        sessions=sessions,
        passkey_routes=passkey_table(passkeys, mount=PREFIX, audit=audit),
        guard=guard,
        routes=routes,
    )
