"""Whether a configured rule approves a card in a person's stead. Pure functions; the clock is passed in.

A rule (`gateway.config.approvals.PolicyRule`) is an operator's standing decision about one tool:
"refunds of at most 20.00 by support staff, during office hours, need nobody". It approves as
``policy:<rule>``, and only ever as one approver of a quorum: a card that needs two approvals still
needs a person. It never approves a tainted card (its requester's model was shown third-party text
within the taint period, `gateway.provenance`): what the agent read may have steered the write, so a
person looks at it. Only a Cedar policy whose condition reads ``context.tainted`` can say otherwise
(`gateway.cedar.engine`), explicitly. The daily budget is
counted by the ledger, in the same transition as the approval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from gateway.cards.card import Card, CardState
from gateway.codes import Code
from gateway.config.approvals import POLICY_PREFIX, Bound, PolicyRule
from gateway.decision import Decision

__all__ = ["PolicyVerdict", "is_policy_approver", "is_tainted", "policy_approval", "rule_admits"]


@dataclass(frozen=True, kw_only=True, slots=True)
class PolicyVerdict:
    """A policy's answer for one card: the rule that approves it, or why none does."""

    decision: Decision
    rule: str | None = None
    """The admitting rule's name when `decision` allows; None otherwise."""

    @property
    def approver(self) -> str:
        """The approver the ledger records: ``policy:<rule>``."""
        return f"{POLICY_PREFIX}{self.rule}"


def is_policy_approver(subject: str) -> bool:
    """Whether `subject` names a policy rather than a person."""
    return subject.startswith(POLICY_PREFIX)


def is_tainted(card: Card) -> bool:
    """Whether the card's requester was tainted when it proposed it (its ``provenance.tainted``): the one place
    that reads it. A card without a provenance record (made before it was recorded) is not tainted."""
    return card.provenance is not None and card.provenance.tainted


def policy_approval(card: Card, rules: Mapping[str, PolicyRule], *, now: datetime) -> PolicyVerdict:
    """The first rule (by name) that approves `card` at `now` (an aware datetime), or a denial.

    Denied (APPROVAL_REQUIRED, the card waits for a person) when the card is not PENDING, already
    has a policy approval, is tainted, or no rule admits it.
    """
    if card.state is not CardState.PENDING:
        return PolicyVerdict(decision=Decision.deny(Code.APPROVAL_REQUIRED, f"card is {card.state.value}"))
    if any(is_policy_approver(approver) for approver in card.approvers):
        return PolicyVerdict(decision=Decision.deny(Code.APPROVAL_REQUIRED, "a policy approved it once already"))
    if is_tainted(card):
        why = "tainted: its requester was shown third-party text, so a person must approve it"
        return PolicyVerdict(decision=Decision.deny(Code.APPROVAL_REQUIRED, why))
    for name in sorted(rules):
        if rule_admits(rules[name], card, now=now):
            return PolicyVerdict(decision=Decision.allow(f"rule {name}"), rule=name)
    return PolicyVerdict(decision=Decision.deny(Code.APPROVAL_REQUIRED, "no policy rule admits it"))


def rule_admits(rule: PolicyRule, card: Card, *, now: datetime) -> bool:
    """Whether every condition of `rule` holds for `card` at `now`: tool, org, role, arguments, hours."""
    if card.tool != rule.tool:
        return False
    if "*" not in rule.orgs and card.requester_org not in rule.orgs:
        return False
    if not card.requester_roles & set(rule.requester_roles):
        return False
    if not all(_within(card.arguments.get(field), bound) for field, bound in rule.arguments.items()):
        return False
    return _in_hours(rule, now)


def _within(value: Any, bound: Bound) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    return (bound.min is None or value >= bound.min) and (bound.max is None or value <= bound.max)


def _in_hours(rule: PolicyRule, now: datetime) -> bool:
    window = rule.window_minutes
    if window is None:
        return True
    if now.tzinfo is None:
        raise ValueError("now must be an aware datetime")
    local = now.astimezone(timezone(timedelta(minutes=rule.offset_minutes)))
    minute = local.hour * 60 + local.minute
    start, end = window
    # A window whose start is after its end spans midnight: 22:00-06:00 is 22:00..24:00 and 00:00..06:00.
    return start <= minute < end if start < end else minute >= start or minute < end
