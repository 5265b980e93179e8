"""The console's sign-in routes for test apps that serve the console beside the admin API without a whole gateway.

The console asks ``/admin/session`` how it may be signed in to; these routes answer as a demo-mode gateway
without an identity provider does (a pasted admin key, no provider), so the console tests that sign in
with a key link keep doing so. A production answer is what tests/signin checks.
"""

from __future__ import annotations

from redis.asyncio import Redis
from starlette.routing import BaseRoute

from gateway.audit.events import AuditSink
from gateway.limits.budgets import Limits
from gateway.limits.rate_limiter import AddressBudgets
from gateway.signin.cookies import CookiePolicy
from gateway.signin.routes import signin_routes
from gateway.store.console_sessions import SessionStore

__all__ = ["demo_signin_routes"]


def demo_signin_routes(client: Redis, audit: AuditSink) -> list[BaseRoute]:
    return signin_routes(
        client=None,
        sessions=SessionStore(client),
        cookie=CookiePolicy("http://127.0.0.1"),
        idle_ms=900_000,
        absolute_ms=28_800_000,
        audit=audit,
        demo=True,
        floods=AddressBudgets(Limits().unauthenticated),
    )
