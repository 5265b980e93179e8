"""The session cookie's attributes, by the console's origin, and the refusal of a sign-in over plain HTTP."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.audit.events import ListAuditSink
from gateway.config.console import ConsoleSection, OidcSection
from gateway.config.settings import Settings
from gateway.errors import ConfigError
from gateway.limits.budgets import Limits
from gateway.limits.rate_limiter import AddressBudgets
from gateway.runtime.approvers import approvers
from gateway.signin.cookies import CookiePolicy
from gateway.store.client import connect


@pytest.mark.parametrize(
    ("origin", "header"),
    [
        (
            "https://countersign.example.com",
            "__Host-countersign_session=t; Path=/; Max-Age=60; HttpOnly; SameSite=Strict; Secure",
        ),
        ("http://127.0.0.1:8765", "countersign_session=t; Path=/admin; Max-Age=60; HttpOnly; SameSite=Strict"),
        ("http://localhost:8765", "countersign_session=t; Path=/admin; Max-Age=60; HttpOnly; SameSite=Strict"),
    ],
)
def test_the_cookie_is_httponly_strict_and_secure_with_the_host_prefix_beyond_loopback(
    origin: str, header: str
) -> None:
    assert CookiePolicy(origin).set("t", max_age_seconds=60) == header
    assert "Max-Age=0" in CookiePolicy(origin).clear()


def test_a_sign_in_over_plain_http_beyond_loopback_is_refused_at_start() -> None:
    """The session cookie would cross the network in clear text: the gateway does not start so."""
    oidc = OidcSection(issuer="https://login.example.com", client_id="console")
    base = Settings()
    settings = replace(
        base,
        console=ConsoleSection(oidc=oidc),
        notifications=replace(base.notifications, console_url="http://countersign.example.com"),
    )
    connection = connect("redis://127.0.0.1:1", connect_timeout=0.1, timeout=0.1)  # never reached
    with pytest.raises(ConfigError) as refused:
        approvers(settings, connection, ListAuditSink(), AddressBudgets(Limits().unauthenticated))
    assert "console_url http://countersign.example.com" in str(refused.value)
