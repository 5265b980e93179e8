"""Who may decide a card, and how many approvals a proposal needs. Pure functions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.cards.card import Card
from gateway.codes import Code
from gateway.config.approvals import POLICY_PREFIX
from gateway.decision import Decision
from gateway.principal import KeyKind, Principal, identity_of
from gateway.tools.declarations import Approval

__all__ = ["approvals_required", "may_decide"]


def approvals_required(
    approval: Approval, arguments: Mapping[str, Any], *, tainted: bool = False, tainted_approvals: int = 1
) -> int:
    """Distinct approvers a proposal needs: the base number, raised by any escalation that applies,
    and to at least `tainted_approvals` when the proposal is tainted (`policies.provenance`).

    `arguments` are the proposal's canonical arguments; an escalation applies when its field holds a
    number above its threshold (a missing or non-numeric field never lowers the requirement). The
    org's tainted quorum only ever raises the number; separation of duties holds for every approver.
    """
    required = max(approval.required, tainted_approvals) if tainted else approval.required
    for escalation in approval.escalations:
        value = arguments.get(escalation.field)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > escalation.above:
            required = max(required, escalation.required)
    return required


def may_decide(card: Card, admin: Principal) -> Decision:
    """Whether `admin` may approve, reject, cancel or resolve `card`.

    A card of another org is NOT_FOUND (exactly as if it did not exist); the requester is never
    its own approver, under any spelling of its subject, look-alikes included (`identity_of`, the UTS #39
    skeleton of the normal form: one person, one identity): for a card an agent
    proposed on a person's behalf (a delegated token), the requester is that person, and neither
    they nor anyone in the token's actor chain may decide it; the admin needs the card's approver role.
    A subject named like a policy approver (``policy:...``) decides nothing: that name is the rules'.
    """
    if admin.kind is not KeyKind.ADMIN or admin.org != card.requester_org:
        return Decision.deny(Code.NOT_FOUND, "card is not visible to this admin")
    admin_identity = identity_of(admin.subject)
    if admin_identity.casefold().startswith(identity_of(POLICY_PREFIX).casefold()):
        return Decision.deny(Code.PERMISSION_DENIED, f"{POLICY_PREFIX}... names policy approvers, never a person")
    if admin_identity == identity_of(card.requester_subject):
        return Decision.deny(Code.PERMISSION_DENIED, "the requester cannot decide its own card")
    if admin_identity in {identity_of(actor) for actor in card.actors}:
        return Decision.deny(Code.PERMISSION_DENIED, "an actor of the request cannot decide its card")
    if card.approver_role not in admin.roles:
        return Decision.deny(Code.PERMISSION_DENIED, f"deciding needs role {card.approver_role}")
    return Decision.allow(f"role {card.approver_role}")
