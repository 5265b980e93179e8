from __future__ import annotations

import pytest

from gateway.codes import Code
from gateway.config.org_adapters import OrgAdapters
from gateway.principal import KeyKind, Principal
from policies.adapter_authority import may_manage_adapter, may_review_adapters

ORGS = OrgAdapters({"acme": frozenset({"expenses"}), "globex": frozenset({"rooms"})})


def _key(org: str, *roles: str, kind: KeyKind = KeyKind.ADMIN) -> Principal:
    return Principal(subject=f"root@{org}.example", org=org, roles=frozenset(roles), kind=kind, key_id="k")


@pytest.mark.parametrize(
    ("who", "adapter", "allowed"),
    [
        (_key("acme", "registry"), "expenses", True),
        (_key("globex", "registry"), "expenses", False),
        (_key("acme", "registry"), "billing", False),
        (_key("acme", "approver"), "expenses", False),
        (_key("globex", "registry-operator"), "expenses", True),
        (_key("initech", "registry-operator"), "billing", True),
        (_key("acme", "registry", kind=KeyKind.SERVICE), "expenses", False),
        (_key("acme", "registry-operator", kind=KeyKind.AGENT), "expenses", False),
    ],
)
def test_an_adapter_is_managed_by_its_orgs_registry_admins_or_an_operator(
    who: Principal, adapter: str, allowed: bool
) -> None:
    """The registry role covers the adapters one's org serves; the operator role covers all; nothing else does."""
    decision = may_manage_adapter(who, adapter, ORGS)
    assert decision.allowed is allowed
    assert decision.code is (None if allowed else Code.PERMISSION_DENIED)


@pytest.mark.parametrize(
    ("who", "allowed"),
    [
        (_key("acme", "registry"), True),
        (_key("initech", "registry-operator"), True),
        (_key("acme", "approver"), False),
        (_key("acme", "registry", kind=KeyKind.SERVICE), False),
    ],
)
def test_the_review_opens_for_either_registry_role(who: Principal, allowed: bool) -> None:
    """An admin without an org's adapters still opens the review (and sees none); other keys cannot."""
    assert may_review_adapters(who).allowed is allowed
