"""Whether a person's approval of a card needs their passkey. A pure function."""

from __future__ import annotations

from fnmatch import fnmatchcase

from gateway.cards.card import Card
from gateway.config.approvals import PasskeyRequirement

__all__ = ["needs_passkey"]


def needs_passkey(card: Card, rule: PasskeyRequirement, *, registered: bool) -> bool:
    """Whether approving `card` takes a passkey assertion: its tool or its org is named by `rule`, or
    the approver has a passkey `registered` and `rule.once_registered` holds."""
    if any(fnmatchcase(card.tool, pattern) for pattern in rule.tools):
        return True
    if "*" in rule.orgs or card.requester_org in rule.orgs:
        return True
    return registered and rule.once_registered
