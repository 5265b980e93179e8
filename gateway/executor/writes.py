"""The write path: an approved card, claimed, re-checked, dispatched once with its key, classified.

Who calls it: the worker, with the id of an approved card (`run_approved`) or of a write whose
outcome is unknown (`reconcile`). It returns the card as it ends up and audits every outcome.

The order of the steps in `WritePath._send` is the specification: re-check the binding (the tool
is still served with the same definition, the arguments still hash to the approved args_hash, the
requester's key is live and still has access) -> hold the approval receipt's signer (no signing key:
released, unsent) -> the precondition (a first send reads the tool's preview again: what the approver
decided on no longer holding is FAILED, PRECONDITION_CHANGED, unsent) -> record DISPATCHED, durably,
before anything is sent -> send once with the key minted when the card was created -> classify the attempt by policy
(nothing sent: release and retry with the same key; definitive refusal of a first send: FAILED;
anything that may have landed, and a resend's refusal: UNKNOWN, settled by a status query, never a
blind resend). An argument the adapter cannot put in its request path (`PathArgumentError`) is
FAILED, unsent: no retry could send it.

Nothing is sent on a transition the ledger did not confirm durable (``ERR_NOT_DURABLE``): an
unconfirmed claim or dispatch is released at once (the release is itself unconfirmed, and that is
fine: a card the store loses is as it was, and its lease runs out) and the card waits APPROVED for
the ledger to be durable again. An outcome recorded but not confirmed is audited as such: if the
store loses it, the card is left DISPATCHED, its lease runs out and it becomes UNKNOWN, settled by a
status query, never a blind resend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from gateway.audit.events import AuditEvent, AuditSink
from gateway.cards.card import Card, CardState
from gateway.cards.contract import DurabilityGuard, Ledger, Transition, TransitionStatus
from gateway.codes import Code
from gateway.config.org_adapters import OrgAdapters
from gateway.decision import Decision
from gateway.errors import (
    PathArgumentError,
    UpstreamError,
    UpstreamNotFoundError,
    UpstreamRateLimitedError,
    UpstreamRefusedError,
)
from gateway.executor.deferrals import DeferralLog
from gateway.executor.invoke import Invoker, args_hash, requester_of
from gateway.principal import TOKEN_KEY_PREFIX, Principal
from gateway.tools.backend_http import RECEIPT_REFUSALS
from gateway.tools.context import RequestSigner, ToolContext
from gateway.tools.declarations import Tool
from gateway.tools.toolbox import Toolbox, ToolSource
from policies.access import decide_access
from policies.engine import PolicyEngine
from policies.outcome import Attempt, Next, backoff_ms, classify, reconcile_step, retry_delay_ms

__all__ = ["LivePrincipal", "Receipts", "SubjectRevoked", "WritePath"]

LivePrincipal = Callable[[str], Awaitable[Principal | None]]
"""``key_id -> principal`` as the key stands now; None when it is unknown or revoked."""
SubjectRevoked = Callable[[str, str], Awaitable[bool]]
"""``(org, subject) -> whether that subject, under any spelling, is revoked`` (`gateway.store.keys`)."""
Receipts = Callable[[Card, str], Awaitable[RequestSigner | None]]
"""``(card, adapter) -> what signs the receipts of one send`` (`gateway.signing.signer.Signer.receipts_for`);
None when the gateway has no signing key."""

_NO_SIGNING_KEY = "no signing key for the approval receipt (countersign signing-keys rotate)"
_LATE_RESEND = "execute_by passed before a resend; the earlier send may have landed"
_REVOKED = "the subject that proposed this write was revoked before it ran; nothing was sent"
_UNCONFIRMED = "outcome recorded, not confirmed durable: if lost, the lease runs out -> UNKNOWN"


class WritePath:
    """Runs approved cards and settles unknown outcomes, for the worker."""

    def __init__(
        self,
        *,
        tools: ToolSource,
        org_adapters: OrgAdapters,
        policy: PolicyEngine | None,
        audit: AuditSink,
        invoker: Invoker,
        ledger: Ledger,
        guard: DurabilityGuard,
        live_principal: LivePrincipal,
        subject_revoked: SubjectRevoked,
        healthy: Callable[[str], bool],
        lease_ms: int,
        reconcile_horizon_ms: int,
        receipts: Receipts,
    ) -> None:
        self._tools = tools
        self._org_adapters = org_adapters
        self._policy = policy
        self._audit = audit
        self._invoker = invoker
        self._ledger = ledger
        self._guard = guard
        self._live_principal = live_principal
        self._subject_revoked = subject_revoked
        self._healthy = healthy
        self._lease_ms = lease_ms
        self._horizon_ms = reconcile_horizon_ms
        self._receipts = receipts
        self._deferrals = DeferralLog()

    async def run_approved(self, card_id: str, *, worker: str) -> Card | None:
        """Claim an approved card and run its write once. Returns the card as it ends up."""
        card = await self._ledger.get(card_id)
        if card is None or card.state is not CardState.APPROVED:
            return card
        # Deferrals are not failures: the card stays APPROVED and the sweeper enqueues it again.
        if not await self._guard.writable():
            return await self._defer(card, "ledger not durable or unreachable")
        tool = self._tools.current().get(card.tool)
        if tool is not None and not self._healthy(tool.adapter):
            return await self._defer(card, f"adapter {tool.adapter} is unhealthy")
        # No signing key: deferred before the claim, as the two above, so a card waiting for an operator's
        # first key is looked at again on its timer, not claimed and released (three card events) every 0.5 s.
        # The signer read here is the one the send uses: one read of the key set per send.
        signer = None
        if tool is not None:
            signer = await self._receipts(card, tool.adapter)
            if signer is None:
                return await self._defer(card, f"{_NO_SIGNING_KEY}; will retry")
        self._deferrals.forget(card_id)
        claim = await self._ledger.claim(card_id, worker=worker, lease_ms=self._lease_ms)
        if claim.unconfirmed and claim.card is not None:
            return await self._release_unconfirmed(claim.card, "claim")
        if claim.status is not TransitionStatus.OK or claim.card is None:
            return claim.card
        held = (tool.adapter, signer) if tool is not None and signer is not None else None
        return await self._send(claim.card, held=held)

    async def _defer(self, card: Card, reason: str) -> Card:
        """Leave `card` APPROVED, unclaimed, for the sweeper to offer again; audited as `DeferralLog` says
        (the first deferral for each reason, then one an interval while it goes on)."""
        if self._deferrals.due(card.card_id, reason):
            await self._record(card, "card.execute", "DEFERRED", reason)
        return card

    async def _release_unconfirmed(self, card: Card, step: str) -> Card | None:
        """A claim or dispatch the ledger applied but did not confirm durable: hand the card back, unsent."""
        reason = f"ledger did not confirm the {step} durable"
        released = self._ledger.release(
            card.card_id, fence=card.fence, reason=reason, requeue_ms=backoff_ms(card.attempts)
        )
        return await self._settle(card, released, "NOT_SENT", f"{reason}; will retry")

    async def _settle(
        self,
        card: Card,
        transition: Awaitable[Transition],
        outcome: str,
        reason: str,
        *,
        action: str = "card.execute",
        code: str = "",
        unconfirmed: str = "",
    ) -> Card | None:
        """Await `transition` of `card` (an end, a hand-back, a reconciliation) and audit it as `outcome`: every
        change this path makes to a card it holds is recorded here. `unconfirmed` is added to the reason when
        the ledger could not confirm the change durable. Returns the card as the ledger answered it."""
        done = await transition
        if unconfirmed and done.status is TransitionStatus.ERR_NOT_DURABLE:
            reason = f"{reason}; {unconfirmed}".removeprefix("; ")
        await self._record(card, action, outcome, reason, code=code)
        return done.card

    def _fail_unsent(self, card: Card, code: str, reason: str, **more: Any) -> Awaitable[Transition]:
        """The transition that ends `card` FAILED with nothing sent (for `_settle`); `more` joins its evidence."""
        evidence = {"code": code, "reason": reason, "sent": False, **more}
        return self._ledger.complete(
            card.card_id, fence=card.fence, outcome=CardState.FAILED, reference="", evidence=evidence, settle_ms=0
        )

    async def reconcile(self, card_id: str, *, worker: str) -> Card | None:
        """Resolve an UNKNOWN write by asking the backend, by its idempotency key, what happened."""
        card = await self._ledger.get(card_id)
        toolbox = self._tools.current()
        tool = toolbox.get(card.tool) if card is not None else None
        if card is None or card.state is not CardState.UNKNOWN:
            return card
        # A changed definition may look up and resend elsewhere (a registered adapter's new base URL, where the
        # key means nothing): what the earlier send did is for a person to find out.
        if tool is None or tool.write_contract is None or toolbox.version(tool.name) != card.tool_version:
            reason = "tool no longer served" if tool is None else "tool definition changed since it was sent"
            handed = self._ledger.reconcile(
                card_id, result="NEEDS_RECONCILIATION", reference="", evidence={"reason": reason}
            )
            return await self._settle(card, handed, "NEEDS_RECONCILIATION", reason, action="card.reconcile")
        contract = tool.write_contract
        # A lookup matches on the approved arguments (no key travels with some writes), and a state lookup
        # compares what it finds with what the card's preview read at proposal.
        ctx = dataclasses.replace(
            self._invoker.context(tool, requester_of(card), idempotency_key=card.idempotency_key),
            approved_arguments=card.arguments,
            preview_facts=card.preview.facts if card.preview is not None else None,
        )
        wait_ms = 0
        try:
            status = await contract.status_lookup(card.idempotency_key, ctx)
        except UpstreamError as error:
            status = None
            # A 429 asks for a wait: the next query is no sooner (a write's resend waits the same way).
            wait_ms = int(error.retry_after * 1000) if isinstance(error, UpstreamRateLimitedError) else 0
        now_ms = await self._ledger.server_time_ms()
        dispatched_ms = card.dispatched_ms or card.created_ms
        step = reconcile_step(
            status,
            contract,
            now_ms=now_ms,
            first_dispatched_ms=card.first_dispatched_ms or dispatched_ms,
            dispatched_ms=dispatched_ms,
            execute_by_ms=card.execute_by_ms or 0,  # none recorded: treated as passed, never a resend
            horizon_ms=self._horizon_ms,
            sends=card.attempts,
            wait_ms=wait_ms,
        )
        evidence: dict[str, Any] = {"reason": step.reason}
        if status is not None:
            # For people: which lookup answered, and what it saw (the backend's text: never the model's).
            evidence["status"] = status.state
            evidence["via"] = status.via
            evidence["backend"] = dict(status.detail)
        if step.next is Next.RESEND:
            resend = await self._ledger.claim_resend(
                card_id, worker=worker, lease_ms=self._lease_ms, max_resends=contract.max_resends
            )
            if resend.unconfirmed and resend.card is not None:
                return await self._release_unconfirmed(resend.card, "resend claim")
            if resend.status is TransitionStatus.OK and resend.card is not None:
                return await self._send(resend.card, held=None)
            if resend.status is TransitionStatus.ERR_EXPIRED:  # execute_by passed since the query
                await self._record(resend.card or card, "card.reconcile", "NEEDS_RECONCILIATION", _LATE_RESEND)
            if resend.status is TransitionStatus.ERR_QUOTA_EXCEEDED:  # the ledger holds the contract's cap too
                reason = f"resent {card.attempts - 1} times, the write contract's cap of {contract.max_resends}"
                await self._record(resend.card or card, "card.reconcile", "NEEDS_RECONCILIATION", reason)
            return resend.card
        reference = status.reference or "" if status is not None else ""
        result = self._ledger.reconcile(
            card_id, result=step.next.value, reference=reference, evidence=evidence, next_at_ms=step.at_ms
        )
        if step.next is Next.RESCHEDULE:  # asked again later: nothing to audit yet
            return (await result).card
        return await self._settle(card, result, step.next.value, step.reason, action="card.reconcile")

    async def _send(self, card: Card, *, held: tuple[str, RequestSigner] | None) -> Card | None:
        """Run a claimed card: re-check, bind, record DISPATCHED, send once with its key, classify.

        `held` is the receipt's signer the caller read for this send, with the adapter it signs for; None
        (a resend) reads it here. Either way the key set is read once per send, and the tool's context is
        made once.
        """
        toolbox = self._tools.current()
        tool = toolbox.get(card.tool)

        # 1. Re-check what was true at proposal: the tool, its definition, the arguments, access.
        refusal = await self._binding_refusal(card, tool, toolbox)
        if refusal is not None or tool is None or tool.write_contract is None:
            reason = refusal.reason if refusal is not None else "tool not served"
            code = refusal.code.value if refusal is not None and refusal.code else Code.PERMISSION_DENIED.value
            return await self._settle(card, self._fail_unsent(card, code, reason), "FAILED", reason, code=code)
        contract = tool.write_contract
        args = tool.arguments.model_validate(card.arguments)

        # 1b. The receipt's signer, with the key active now (read first: the precondition's identity is signed
        # with the same keys). Without a key nothing is sent (a backend that checks receipts would refuse the
        # write), and the card waits APPROVED for an operator to make one.
        receipt = held[1] if held is not None and held[0] == tool.adapter else await self._receipts(card, tool.adapter)
        if receipt is None:
            released = self._ledger.release(
                card.card_id, fence=card.fence, reason="no signing key", requeue_ms=backoff_ms(card.attempts)
            )
            return await self._settle(card, released, "NOT_SENT", f"{_NO_SIGNING_KEY}; will retry")
        # The one context of this send: the key minted when the card was created and a receipt signed for each
        # request. The precondition reads with it too, without either (a read carries no key and no receipt).
        answers: list[int] = []
        ctx = self._invoker.context(
            tool, requester_of(card), idempotency_key=card.idempotency_key, receipt=receipt, answered=answers.append
        )

        # 1c. The precondition: what the approver decided on still holds, read again just before sending.
        changed = await self._precondition(
            card, tool, args, dataclasses.replace(ctx, idempotency_key=None, receipt=None, answered=None)
        )
        if changed is not None:
            return changed

        # 2. DISPATCHED is recorded before anything is sent: a crash after this point is UNKNOWN.
        dispatched = await self._ledger.dispatch(card.card_id, fence=card.fence)
        if dispatched.unconfirmed:
            # DISPATCHED may not be on disk: a send now could not be accounted for after a crash.
            return await self._release_unconfirmed(card, "dispatch")
        if dispatched.status is TransitionStatus.ERR_NOT_DURABLE:
            return dispatched.card  # a refusal (lease, fence, deadline), not confirmed: nothing to send
        if dispatched.status is TransitionStatus.ERR_EXPIRED:
            # execute_by passed before the send: nothing is sent. A first send expires; a resend goes
            # to a person, since its earlier send may have landed.
            late = dispatched.card.state.value if dispatched.card is not None else CardState.EXPIRED.value
            await self._record(card, "card.execute", late, _LATE_RESEND if card.resend else "execute_by passed")
            return dispatched.card
        if dispatched.status is not TransitionStatus.OK:
            return dispatched.card  # the lease was lost: another worker owns the card now

        # 3. Send once, with the key minted when the card was created and a receipt signed for this send.
        error: UpstreamError | None = None
        reference = ""
        try:
            output = await self._invoker.invoke(tool, args, ctx)
            reference = str(getattr(output, contract.reference_field, "") or "")
        except PathArgumentError as refused:
            # An argument would have changed the endpoint: nothing was sent, and it never can be.
            code, reason = Code.VALIDATION_ERROR.value, str(refused)
            return await self._settle(card, self._fail_unsent(card, code, reason), "FAILED", reason, code=code)
        except UpstreamError as caught:
            error = caught

        # 4. Classify the attempt by policy; nothing that may have landed is ever resent blindly.
        attempt = classify(error, contract, resend=card.resend)
        evidence = _evidence(error, tool)
        if error is None and answers:
            evidence["status"] = answers[-1]  # what the backend answered the write with (201, 200, 204...)
        if attempt is Attempt.NOT_SENT:
            delay_ms = retry_delay_ms(error, card.attempts)
            released = self._ledger.release(
                card.card_id, fence=card.fence, reason=type(error).__name__, requeue_ms=delay_ms
            )
            if error is None or not error.sent:
                why = "nothing reached the backend"
            elif isinstance(error, UpstreamRateLimitedError):
                why = "backend rate-limited (429)"
            else:
                why = f"backend did not take the gateway's credentials ({error.status})"
            return await self._settle(card, released, "NOT_SENT", f"{why}; will retry in {delay_ms / 1000:g} s")
        done = self._ledger.complete(
            card.card_id,
            fence=card.fence,
            outcome=CardState(attempt.value),
            reference=reference,
            evidence=evidence,
            settle_ms=int(contract.settle_seconds * 1000),
        )
        code = str(evidence.get("code", ""))
        return await self._settle(card, done, attempt.value, _what_failed(error), code=code, unconfirmed=_UNCONFIRMED)

    async def _precondition(self, card: Card, tool: Tool, args: Any, ctx: ToolContext) -> Card | None:
        """Read the preview again; a card it no longer holds for ends FAILED (None: go on and send).

        Only a first send is checked: after an UNKNOWN outcome the earlier send may have landed and
        changed the very values read here (a refund lowers what is refundable), so a resend is left to
        the backend's key. A backend that cannot answer now hands the card back unsent, to retry.
        """
        if tool.preview is None or card.resend:
            return None
        try:
            now = await self._invoker.preview(tool, args, ctx)
        except UpstreamNotFoundError:
            now = None  # the target is gone: as material a change as there is
        except UpstreamError as error:
            delay_ms = retry_delay_ms(error, card.attempts)
            released = self._ledger.release(
                card.card_id, fence=card.fence, reason=type(error).__name__, requeue_ms=delay_ms
            )
            return await self._settle(card, released, "NOT_SENT", f"precondition not read ({type(error).__name__})")
        if now is not None and now.infeasible is None:
            return None
        reason = (now.infeasible if now is not None else None) or "the target of the write is no longer there"
        code = Code.PRECONDITION_CHANGED.value
        evidence: Mapping[str, Any] = {"preview_now": now.to_json()} if now is not None else {}
        return await self._settle(card, self._fail_unsent(card, code, reason, **evidence), "FAILED", reason, code=code)

    async def _binding_refusal(self, card: Card, tool: Tool | None, toolbox: Toolbox) -> Decision | None:
        if tool is None:
            return Decision.deny(Code.PERMISSION_DENIED, "tool is no longer served")
        if toolbox.version(tool.name) != card.tool_version:
            return Decision.deny(Code.CONFLICT, "tool definition changed since the card was proposed")
        if args_hash(tool.name, card.tool_version, card.arguments) != card.args_hash:
            return Decision.deny(Code.CONFLICT, "arguments do not match the approved args_hash")
        # A key is read again, so a revoked key stops its approved writes. A token is stored nowhere to be
        # read again: its principal is the one the card recorded from the verified token that proposed it, and
        # what can be revoked is the person it is about, or an agent acting for them (`revoke_subject`), which
        # is read here for key and token alike: a write never runs for a principal revoked before it ran.
        for who in (card.requester_subject, *card.actors):
            if await self._subject_revoked(card.requester_org, who):
                return Decision.deny(
                    Code.REQUESTER_REVOKED,
                    f"{_REVOKED} ({'requester' if who == card.requester_subject else 'an actor'})",
                )
        is_token = card.requester_key_id.startswith(TOKEN_KEY_PREFIX)
        requester = requester_of(card) if is_token else await self._live_principal(card.requester_key_id)
        if requester is None:
            return Decision.deny(Code.REQUESTER_REVOKED, "requester's key is revoked or unknown; nothing was sent")
        access = decide_access(tool, requester, self._org_adapters, self._policy)
        return None if access.allowed else access

    async def _record(self, card: Card, action: str, outcome: str, reason: str, *, code: str = "") -> None:
        await self._audit.record(
            AuditEvent(
                action=action,
                outcome=outcome,
                subject=card.requester_subject,
                org=card.requester_org,
                key_id=card.requester_key_id,
                tool=card.tool,
                code=code,
                reason=reason,
                extra={"card_id": card.card_id},
            )
        )


def _evidence(error: UpstreamError | None, tool: Tool) -> dict[str, Any]:
    """What the card keeps of a failed attempt: for people, the error, the status, the backend's refusal code
    and its own error body (``answer``); for the requester, the tool's own words for that code, when it
    declares some. Only `gateway.cards.words.said_to_agent` and the failure code reach the model."""
    if error is None:
        return {}
    evidence: dict[str, Any] = {"error": type(error).__name__, "status": error.status}
    if error.answer:
        evidence["answer"] = error.answer
    contract = tool.write_contract
    if contract is not None and error.status in contract.applied_statuses:
        evidence["settled"] = f"the backend answered {error.status}, which its write contract says means applied"
    if isinstance(error, UpstreamRefusedError) and error.reason:
        evidence["reason"] = error.reason
        if error.reason in RECEIPT_REFUSALS:
            evidence["code"] = Code.RECEIPT_REFUSED.value
        if error.reason in tool.refusal_words:
            evidence["said"] = tool.refusal_words[error.reason]
    return evidence


def _what_failed(error: UpstreamError | None) -> str:
    if error is None:
        return ""
    backend = f" (backend: {error.reason})" if isinstance(error, UpstreamRefusedError) and error.reason else ""
    return f"{type(error).__name__}{backend}"
