"""The scope checks stand in front of ``/mcp`` only where a token could reach it."""

from __future__ import annotations

import pytest

from gateway.audit import ListAuditSink
from gateway.oauth_config import IssuerSection, OAuthSection, Surface
from gateway.oauth_resource import ScopeChecks, resource_server


async def _sdk(scope: object, receive: object, send: object) -> None:
    """Stands for the app behind the checks."""


@pytest.mark.parametrize(
    ("surfaces", "checked"), [(None, False), (["admin"], False), (["mcp"], True), (["admin", "mcp"], True)]
)
def test_scope_checks_are_composed_only_when_an_issuers_tokens_open_mcp(
    surfaces: list[Surface] | None, checked: bool
) -> None:
    """Without an issuer for ``/mcp`` every principal there is an API key's, which no scope limits."""
    issuers = {} if surfaces is None else {"corp": IssuerSection(issuer="https://issuer.example", surfaces=surfaces)}
    config = OAuthSection(issuers=issuers, resource="https://gw.example/mcp", admin_resource="https://gw.example/admin")
    _, app = resource_server(config, _sdk, audit=ListAuditSink())
    assert isinstance(app, ScopeChecks) is checked
    assert (app is _sdk) is not checked
