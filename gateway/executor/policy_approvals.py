"""Policy approvals: a configured rule approves a new card in a person's stead, as ``policy:<rule>``.

Who calls it: the agent's path, right after the ledger made a card (never for a card it answered
with as existing). What it asks: the `Ledger`'s `approve_by_policy` (the person's `approve`
transition, with the daily budget counted in the same script) and the `AuditSink`. Which rule
admits the card is `policies.policy_approval`, a pure function; this module adds the clock (the
card's creation time, by the Redis clock, so every replica judges a card alike), the UTC day the
budget is counted on, the ledger call and the audit event.

The audit event is a person's approval's (``card.approve``, the card id, state and version) with
the policy as its subject. A rule that declines (the card is tainted, or no rule admits it) or a
spent budget is audited as a denial for every card of a tool some rule names; a card of any other
tool costs nothing here. Nothing is ever refused to the agent: at worst the card waits for a person,
and then people are told (`Announce`): a card of a tool some rule names is not announced when it
is made, but here, once the rules left it to a person.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from gateway.audit.events import AuditEvent, AuditSink
from gateway.cards.card import Card, CardState
from gateway.cards.contract import Ledger, Transition, TransitionStatus
from gateway.codes import Code
from gateway.config.approvals import POLICY_PREFIX, ApprovalSettings
from gateway.decision import Decision
from gateway.errors import StoreUnavailableError
from policies.policy_approval import PolicyVerdict, policy_approval

__all__ = ["Announce", "PolicyApprovals"]


Announce = Callable[[Transition], Awaitable[Transition]]
"""Tell people of a card that waits for them (`gateway.notifications.card_alerts.AlertingLedger.alert`)."""


class PolicyApprovals:
    """Applies the ``[approvals.policies]`` rules to new cards."""

    def __init__(self, *, ledger: Ledger, audit: AuditSink, settings: ApprovalSettings, announce: Announce) -> None:
        self._ledger = ledger
        self._audit = audit
        self._announce = announce
        self._rules = settings.policies
        self._budget = settings.policy_daily_budget
        self._tools = frozenset(rule.tool for rule in settings.policies.values())

    def apply_to(self, tool: str) -> bool:
        """Whether some rule names `tool`: its new cards are proposed awaiting `consider`."""
        return tool in self._tools

    async def consider(self, card: Card, *, auto_policy: str | None) -> Card:
        """The card after the rules had their say: approved by one (PENDING still if it needs more
        approvers), or as it was. Never raises for a store that cannot answer: the card stands.

        A card of a tool some rule names was proposed awaiting this step (`Proposal.awaits_policy`):
        if it still waits for a person, this is where people are told, however the rules answered.
        `auto_policy` is the id of a Cedar policy that approves the card itself (``@approval("auto")``; the
        engine already declined it for a tainted proposal unless the policy's condition reads the taint):
        it approves as ``policy:<id>``, through the same ledger transition and daily budget as a rule.
        """
        if not self.apply_to(card.tool) and auto_policy is None:
            return card
        decided = card
        try:
            decided = await self._decide(card, auto_policy)
        finally:
            if decided.state is CardState.PENDING:
                await self._announce(Transition(status=TransitionStatus.OK, card=decided, extra={}))
        return decided

    async def _decide(self, card: Card, auto_policy: str | None) -> Card:
        now = datetime.fromtimestamp(card.created_ms / 1000, tz=UTC)
        verdict = policy_approval(card, self._rules, now=now)
        if auto_policy is not None and not verdict.decision.allowed:
            verdict = PolicyVerdict(decision=Decision.allow(f"policy {auto_policy}"), rule=auto_policy)
        if not verdict.decision.allowed or verdict.rule is None:
            await self._record(card, POLICY_PREFIX.rstrip(":"), verdict.decision.code, verdict.decision.reason)
            return card
        try:
            result = await self._ledger.approve_by_policy(
                card.card_id,
                rule=verdict.rule,
                requester=(card.requester_org, card.requester_subject),
                version=card.version,
                args_hash=card.args_hash,
                day=now.strftime("%Y%m%d"),
                budget=self._budget,
            )
        except StoreUnavailableError as error:
            await self._record(card, verdict.approver, Code.LEDGER_UNAVAILABLE, f"ledger error: {error.cause}")
            return card
        now_card = result.card or card
        if result.ok:
            await self._record(now_card, verdict.approver, None, verdict.decision.reason, ledger=result.status)
            return now_card
        await self._record(now_card, verdict.approver, *_refusal(result), ledger=result.status)
        # Applied but unconfirmed: the card as the ledger holds it, which says so (and stands if kept).
        return now_card if result.unconfirmed else card

    async def _record(self, card: Card, approver: str, code: Code | None, reason: str, *, ledger: str = "") -> None:
        extra = {"card_id": card.card_id, "state": card.state.value, "version": str(card.version)}
        if ledger:
            extra["ledger"] = ledger
        await self._audit.record(
            AuditEvent(
                action="card.approve",
                outcome="deny" if code is not None else "ok",
                subject=approver,
                org=card.requester_org,
                key_id="",
                tool=card.tool,
                code=code.value if code is not None else "",
                reason=reason,
                extra=extra,
            )
        )


def _refusal(result: Transition) -> tuple[Code, str]:
    """The code and reason a policy approval the ledger refused is audited with."""
    if result.status is TransitionStatus.ERR_QUOTA_EXCEEDED:
        return Code.QUOTA_EXCEEDED, f"daily policy budget spent ({result.extra.get('limit')} a day)"
    if result.status is TransitionStatus.ERR_DUPLICATE_APPROVER:
        return Code.APPROVAL_REQUIRED, "a policy approved it once already"
    if result.status is TransitionStatus.ERR_NOT_DURABLE:
        return Code.LEDGER_UNAVAILABLE, f"approval not confirmed durable ({'; '.join(result.problems)})"
    return Code.CONFLICT, f"the ledger refused the approval ({result.status.value})"
