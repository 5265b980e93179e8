"""Who may review, accept and remove a registered adapter. Pure functions over the vocabulary.

An adapter belongs to the orgs that serve it: the operator's configuration lists it under
``[orgs.NAME] adapters``. An admin with the ``registry`` role acts for their own org, so they may
review, accept and remove exactly the adapters their org serves. An admin with the operator-level
``registry-operator`` role may act on every adapter, including one no org serves yet.

The verdict depends on the key and the configuration only, never on what is registered: a
refusal is the same whether or not an adapter of that name exists, so it cannot tell an admin
about another org's adapters. That is why refusals are PERMISSION_DENIED and not NOT_FOUND.
"""

from __future__ import annotations

from gateway.codes import Code
from gateway.config.org_adapters import OrgAdapters
from gateway.decision import Decision
from gateway.principal import KeyKind, Principal

__all__ = ["OPERATOR_ROLE", "REGISTRY_ROLE", "may_manage_adapter", "may_review_adapters"]

REGISTRY_ROLE = "registry"
"""Reviews, accepts and removes the adapters the admin's own org serves."""
OPERATOR_ROLE = "registry-operator"
"""Reviews, accepts and removes every adapter, whichever org serves it."""


def may_review_adapters(admin: Principal) -> Decision:
    """Whether `admin` may open the adapter review at all (what it then lists is `may_manage_adapter`'s)."""
    if admin.kind is not KeyKind.ADMIN:
        return Decision.deny(Code.PERMISSION_DENIED, f"{admin.kind} keys cannot review adapters")
    if OPERATOR_ROLE in admin.roles:
        return Decision.allow(f"role {OPERATOR_ROLE}")
    if REGISTRY_ROLE in admin.roles:
        return Decision.allow(f"role {REGISTRY_ROLE}")
    return Decision.deny(Code.PERMISSION_DENIED, f"needs the {REGISTRY_ROLE} role")


def may_manage_adapter(admin: Principal, adapter: str, org_adapters: OrgAdapters) -> Decision:
    """Whether `admin` may see, accept or remove the registered adapter named `adapter`.

    Allowed for the ``registry-operator`` role; otherwise only with the ``registry`` role and when
    the admin's org serves `adapter`. Denials are PERMISSION_DENIED, and do not depend on whether
    `adapter` is registered (see the module docstring).
    """
    review = may_review_adapters(admin)
    if not review.allowed or OPERATOR_ROLE in admin.roles:
        return review
    if not org_adapters.enabled(admin.org, adapter):
        return Decision.deny(
            Code.PERMISSION_DENIED, f"org {admin.org} does not serve adapter {adapter} (or needs {OPERATOR_ROLE})"
        )
    return Decision.allow(f"role {REGISTRY_ROLE}; org {admin.org} serves {adapter}")
