"""The access policy: one pure function, a table of verdicts."""

from __future__ import annotations

import pytest

from gateway.codes import Code
from gateway.config.org_adapters import OrgAdapters
from gateway.principal import KeyKind, Principal
from gateway.tools.declarations import Access
from policies.access import decide_access
from tests.support.tools import read_tool

GRANTS = OrgAdapters({"acme": frozenset({"demo"}), "globex": frozenset()})
STAFF_ONLY = read_tool(access=Access.roles("staff", "support"))
PUBLIC = read_tool(access=Access.public())


def _principal(org: str = "acme", roles: frozenset[str] = frozenset(), kind: KeyKind = KeyKind.AGENT) -> Principal:
    return Principal(subject="alice@acme.example", org=org, roles=roles, kind=kind, key_id="key_1")


@pytest.mark.parametrize(
    ("org", "roles", "public_allowed", "staff_allowed"),
    [
        ("acme", frozenset(), True, False),
        ("acme", frozenset({"staff"}), True, True),
        ("acme", frozenset({"support", "other"}), True, True),
        ("acme", frozenset({"other"}), True, False),
        ("globex", frozenset({"staff"}), False, False),
        ("initech", frozenset({"staff"}), False, False),
    ],
)
def test_tool_is_allowed_only_with_org_grant_and_role(
    org: str, roles: frozenset[str], public_allowed: bool, staff_allowed: bool
) -> None:
    """Public tools need the org's grant; role tools need the grant and one of the roles."""
    principal = _principal(org, roles)
    assert decide_access(PUBLIC, principal, GRANTS, None).allowed is public_allowed
    assert decide_access(STAFF_ONLY, principal, GRANTS, None).allowed is staff_allowed


@pytest.mark.parametrize("kind", [KeyKind.ADMIN, KeyKind.SERVICE])
def test_non_agent_keys_cannot_call_tools(kind: KeyKind) -> None:
    """Admin and service keys open other surfaces, never tools."""
    decision = decide_access(PUBLIC, _principal(roles=frozenset({"staff"}), kind=kind), GRANTS, None)
    assert decision.allowed is False
    assert decision.code is Code.PERMISSION_DENIED


def test_denial_carries_a_code_and_a_reason() -> None:
    """A denial is a value with a stable code and an auditable reason."""
    decision = decide_access(STAFF_ONLY, _principal(), GRANTS, None)
    assert decision.code is Code.PERMISSION_DENIED
    assert decision.reason
