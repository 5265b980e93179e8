"""The agent's path: one ``tools/call`` from access check to sealed envelope.

Who calls it: the MCP surface, once per ``tools/call``, with the authenticated principal, the tool
name and the raw arguments the model proposed. It returns a sealed `Envelope`, never raises for
anything a caller did, and audits every call exactly once.

The order of the steps in `AgentPath._execute` is the specification: access (the same function the
catalog lists with) -> rate budgets -> refuse agent-chosen keys -> validate the arguments -> the
approval gate (a write only ever becomes a card, after its preview
found it feasible, with its provenance, or it repeats a write that succeeded lately: then that card
answers; a configured rule may approve a new card as one approver: `gateway.executor.policy_approvals`)
-> backend health -> invoke -> withhold untrusted text (fence what is shown) -> remember the read
(tainting its principal when the result showed third-party text) -> seal.

Provenance (`gateway.provenance`): every answered read is remembered for its MCP session, or for
its principal when the client holds none, in its audit append's round trip (two on a Cluster); a
read that cannot be remembered is not answered, so a store that fails can never hide a read of
untrusted text from the card that follows it. A proposal reads that history back and carries
`policies.provenance.assess`'s verdict on its card and in its audit event; a tainted one needs the
org's tainted quorum.

Rate budgets come right after access. An unknown or forbidden name is refused before it costs
anything: it reads as PERMISSION_DENIED whatever the caller's budget, so the budget cannot be used
to probe the catalog, and it reaches no backend and no approver, which is what the budgets protect
(it costs its audit write either way). Everything after access spends, invalid arguments
included: an agent looping on a malformed call is a runaway like any other. The budgets are the
requester's (org and subject), shared by all its keys (`policies.charges`); a store that
cannot answer fails the call closed, as LEDGER_UNAVAILABLE.

The card a proposal files (`_proposal`) is a pure function of the tool, the validated arguments,
the caller, its preview and its provenance: the approvers it needs (`policies.approval.approvals_required`,
with the org's quorum for a tainted card), the summary and the agent's own words, its decision and
execution windows.

Whatever a backend writes is third-party text. A failure reaches the model as a `Code` and its fixed
message only; the backend's refusal code goes to the audit event's reason, for people. A validation
error is told field by field without its input, and an argument that would choose an idempotency
key is refused by name.

Fail closed (ARCHITECTURE invariant 7). A proposal is acknowledged only once the ledger confirmed
its card durable; ``ERR_NOT_DURABLE`` is LEDGER_UNAVAILABLE (retryable), and the same call made
again once the ledger is durable answers with the same card (dedupe), never a second one. A read is
answered only while it can be audited: when the audit trail cannot be written (Redis is gone), its
result is withheld and the call refused with LEDGER_UNAVAILABLE, and until an audit append lands
again every call is refused before it reaches a backend (each refusal's own audit append is the
probe that finds Redis back).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from gateway.audit.events import AuditEvent, AuditSink
from gateway.cards.card import Card
from gateway.cards.contract import DurabilityGuard, Ledger, Proposal, TransitionStatus
from gateway.cards.views import card_for_agent
from gateway.codes import Code
from gateway.config.org_adapters import OrgAdapters
from gateway.decision import Decision
from gateway.envelope import Envelope
from gateway.errors import (
    PathArgumentError,
    StoreUnavailableError,
    UpstreamError,
    UpstreamRateLimitedError,
    UpstreamRefusedError,
)
from gateway.executor.invoke import Invoker, args_hash
from gateway.executor.policy_approvals import PolicyApprovals
from gateway.executor.read_memory import ReadMemory, audit_fields
from gateway.limits.budgets import Limits
from gateway.limits.rate_limiter import Charge, RateLimiter, RateVerdict
from gateway.principal import Principal
from gateway.printable import escape_unprintable
from gateway.provenance import Provenance, history_owner
from gateway.telemetry.metrics import UNKNOWN_TOOL, count_proposal, count_tool_call
from gateway.telemetry.tracing import annotate
from gateway.tools.declarations import Mode, Tool, is_key_field
from gateway.tools.preview import Preview
from gateway.tools.toolbox import ToolSource
from gateway.untrusted import holds_third_party_text, withhold_untrusted
from policies.access import decide_access, decide_call
from policies.approval import approvals_required
from policies.charges import budget_owner, charges_for
from policies.engine import AUTO, PolicyAnswer, PolicyEngine

__all__ = ["AgentPath", "HeldRefusal", "with_acting_client"]

logger = logging.getLogger(__name__)

_UNKNOWN_TOOL = Decision.deny(Code.PERMISSION_DENIED, "unknown tool")
_SHOWN = {"shown_untrusted": "true"}
"""The audit field of a read whose result showed the model third-party text (fenced): the read that taints."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HeldRefusal:
    """A refusal known without I/O (`AgentPath.held_refusal`): what the audit reads, what the caller
    reads, and for how many more seconds it certainly holds."""

    decision: Decision
    envelope: Envelope
    retry_after: float


class AgentPath:
    """Runs reads and files write proposals for principals."""

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
        healthy: Callable[[str], bool],
        limiter: RateLimiter,
        limits: Limits,
        policies: PolicyApprovals,
        memory: ReadMemory,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._tools = tools
        self._org_adapters = org_adapters
        self._policy = policy
        self._audit = audit
        self._invoker = invoker
        self._ledger = ledger
        self._guard = guard
        self._healthy = healthy
        self._limiter = limiter
        self._limits = limits
        self._policies = policies
        self._clock = clock
        self._memory = memory
        self._audited = True
        """Whether the last audit append landed in the trail: while it did not, reads are refused up front."""

    async def execute(
        self, principal: Principal, name: str, arguments: Mapping[str, Any] | None, *, session: str | None = None
    ) -> Envelope:
        """Run tool `name` for `principal`, in 2025-11-25 session `session` if any. Every outcome is an envelope
        and one audit event; an answered read joins the principal's history of reads
        (`gateway.provenance.history_owner`), and one that showed third-party text taints the principal (and
        `session` for as long as it lives).

        A bug in an adapter (or here) is logged with its traceback, audited as INTERNAL_ERROR, and
        answered with that code: the caller never sees a stack trace.
        """
        started = self._clock()
        try:
            owner = history_owner(principal.org, principal.subject)
            return await self._execute(principal, name, arguments, started, owner, session)
        except Exception:
            logger.exception("tool %s failed unexpectedly", escape_unprintable(name))
            failure = Decision.deny(Code.INTERNAL_ERROR, "unexpected error; see the gateway log")
            return await self._refuse(principal, name, failure, started, ran=True)

    async def _execute(
        self,
        principal: Principal,
        name: str,
        arguments: Mapping[str, Any] | None,
        started: float,
        owner: str,
        session: str | None,
    ) -> Envelope:
        toolbox = self._tools.current()
        tool = toolbox.get(name)

        # 1. Access: the same function the catalog uses. An unknown name and a forbidden one
        #    answer identically, so the catalog cannot be probed.
        decision = _UNKNOWN_TOOL if tool is None else decide_access(tool, principal, self._org_adapters, self._policy)
        if tool is None or not decision.allowed:
            return await self._refuse(principal, name, decision, started)

        # 2. Rate budgets: the requester's class budget and the tool's own, in one atomic check.
        over = await self._spend(tool, principal, started)
        if over is not None:
            return over

        # 3. Input validation against the same closed model the catalog's schema came from. An
        #    agent that tries to choose an idempotency key is told keys are the gateway's.
        supplied_keys = _key_fields(arguments or {})
        if supplied_keys:
            refusal = Decision.deny(Code.VALIDATION_ERROR, "agent supplied an idempotency key")
            return await self._refuse(principal, name, refusal, started, details=_minted_keys(supplied_keys))
        try:
            args = tool.arguments.model_validate(arguments or {})
        except ValidationError as error:
            invalid = Decision.deny(Code.VALIDATION_ERROR, f"{error.error_count()} invalid argument(s)")
            return await self._refuse(principal, name, invalid, started, details={"errors": _error_summary(error)})

        # 4. Approval gate: a write never executes on an agent's call. The most it can do is
        #    create a card bound to the ledger, which a person must approve. Its policy verdict needs
        #    the proposal's provenance, so the write path asks it once that is known.
        if tool.mode is Mode.WRITE:
            return await self._propose(tool, toolbox.version(tool.name), args, principal, started, owner, session)

        # The operator's policies again, now with the validated arguments (the built-in rules read none).
        verdict = decide_call(
            tool, principal, self._org_adapters, self._policy, args.model_dump(mode="json"), tainted=False
        )
        if not verdict.decision.allowed:
            return await self._refuse(principal, name, verdict.decision, started)
        decision = verdict.decision

        # A read that could not be audited is not answered: refused up front while the trail is down.
        if not self._audited:
            down = Decision.deny(Code.LEDGER_UNAVAILABLE, "the audit trail cannot be written; no call is served")
            return await self._refuse(principal, name, down, started)

        # A backend known to be down fails fast instead of holding the caller to the deadline.
        if not self._healthy(tool.adapter):
            down = Decision.deny(Code.UPSTREAM_UNAVAILABLE, f"adapter {tool.adapter} is unhealthy")
            return await self._refuse(principal, name, down, started, ran=True)

        # 5. Execute with the tool's deadline; 6. validate the output; 7. seal.
        try:
            output = await self._invoker.invoke(tool, args, self._invoker.context(tool, principal))
        except PathArgumentError as error:
            return await self._refuse_path(principal, name, error, started)
        except UpstreamError as error:
            return await self._refuse(principal, name, _failure(error), started, ran=True, details=_wait(error))
        safe = withhold_untrusted(output)
        model = tool.model_view(safe) if tool.model_view is not None else safe.model_dump(mode="json")
        human = tool.human_view(output) if tool.human_view is not None else None
        envelope = Envelope.ok(model, human=human, untrusted=_people_read_third_party_text(tool))
        try:  # remembered and audited, in one round trip where the store can; what it showed may taint
            audited = await self._record(
                principal,
                name,
                "ok",
                started,
                reason=decision.reason,
                extra=_SHOWN if envelope.fenced else None,
                read=(tool, owner, envelope.fenced),
            )
        except StoreUnavailableError:
            self._guard.invalidate()  # the same store keeps the ledger: let the next write check it again
            down = Decision.deny(Code.LEDGER_UNAVAILABLE, "the read could not be remembered for provenance")
            return await self._refuse(principal, name, down, started, ran=True)  # the result is withheld
        if not audited:
            self._guard.invalidate()
            return Envelope.refused(Code.LEDGER_UNAVAILABLE)  # the result is withheld: it was not audited
        if envelope.fenced and session is not None:
            self._memory.hold_session(session, tool)
        return envelope

    def forget_session(self, session: str) -> None:
        """2025-11-25 session `session` closed: its taint, if any, is no longer held (the principal's stays)."""
        self._memory.forget_session(session)

    def held_refusal(self, principal: Principal, name: str) -> HeldRefusal | None:
        """The answer `execute` would give a call of `name` by `principal` that a rate budget certainly
        refuses now, known without I/O (`RateLimiter.held`); None when the call must go through `execute`.

        For the MCP edge, which answers a flood before the SDK parses it. It takes the same first two
        steps as `execute` (access, then the budgets), so an unknown or forbidden name is never answered
        here (it reads as PERMISSION_DENIED, audited, whatever the budget). It spends nothing and audits
        nothing: the caller audits the refusals it answers (`gateway.mcp.flood_audit`).
        """
        tool = self._tools.current().get(name)
        if tool is None or not decide_access(tool, principal, self._org_adapters, self._policy).allowed:
            return None
        verdict = self._limiter.held(budget_owner(principal), charges_for(tool, principal, self._limits))
        if verdict is None:
            return None
        envelope = Envelope.refused(Code.RATE_LIMITED, details=_retry(verdict))
        return HeldRefusal(decision=_spent(verdict), envelope=envelope, retry_after=verdict.retry_after)

    async def listing_refusal(self, principal: Principal) -> HeldRefusal | None:
        """Spend one listing of `principal`'s tools (``tools/list``) from its budget: every door that does work for a
        caller is under a limit. Listings have a bucket of their own at the read budget's rate, so a client that
        lists before it calls does not halve its reads. The refusal (audited as ``tools.list``) when the budget is
        spent or cannot be read; None to go on."""
        charge = Charge(bucket="listings", budget=self._limits.budget("reads", principal.org))
        try:
            verdict = await self._limiter.spend(budget_owner(principal), (charge,))
        except StoreUnavailableError as error:
            refusal = HeldRefusal(
                decision=Decision.deny(Code.LEDGER_UNAVAILABLE, f"rate limiter error: {error.cause}"),
                envelope=Envelope.refused(Code.LEDGER_UNAVAILABLE),
                retry_after=1.0,
            )
        else:
            if verdict.allowed:
                return None
            envelope = Envelope.refused(Code.RATE_LIMITED, details=_retry(verdict))
            refusal = HeldRefusal(decision=_spent(verdict), envelope=envelope, retry_after=verdict.retry_after)
        code = refusal.decision.code.value if refusal.decision.code is not None else ""
        await self._audit.record(
            AuditEvent.refusal(
                principal, "tools.list", code, refusal.decision.reason, with_acting_client(principal, {})
            )
        )
        return refusal

    async def _propose(
        self,
        tool: Tool,
        version: str,
        args: BaseModel,
        principal: Principal,
        started: float,
        owner: str,
        session: str | None,
    ) -> Envelope:
        """Create (or find the open) card for a write proposal. Nothing is sent to any backend."""
        if not await self._guard.writable():
            down = Decision.deny(Code.LEDGER_UNAVAILABLE, "ledger is not durable or unreachable")
            return await self._refuse(principal, tool.name, down, started)
        # A write the policies forbid whatever its provenance is refused before its preview reads the backend.
        refused = self._forbidden_either_way(tool, principal, args.model_dump(mode="json"))
        if refused is not None:
            return await self._refuse(principal, tool.name, refused, started)
        # The target must be one this caller was shown (its own booking, its org's order). A preview checks that
        # and reads what the write will change, in one read; a backend that cannot answer refuses the proposal
        # (retryably): no card is filed without its preview. The caller's reads (provenance) are read meanwhile.
        preview, reads = await self._memory.beside(owner, self._look(tool, args, principal))
        if isinstance(preview, PathArgumentError):
            return await self._refuse_path(principal, tool.name, preview, started)
        if isinstance(preview, UpstreamError):
            failed = _failure(preview)
            return await self._refuse(principal, tool.name, failed, started, ran=True, details=_wait(preview))
        if isinstance(preview, Exception):
            raise preview
        canonical = args.model_dump(mode="json")
        bound_to = args_hash(tool.name, version, canonical)
        dedupe_key = f"{principal.org}|{principal.subject}|{tool.name}|{bound_to}"
        if preview is not None and preview.infeasible is not None:
            # A repeat of a write that succeeded is answered with its card: that very write is why the
            # backend would refuse it now (the slot it booked is taken). Anything else: no card for a
            # person to approve in vain.
            done = await self._repeat_of(principal, dedupe_key)
            if done is not None:
                return await self._receipt(tool, principal, started, done, existing=True, verdict=None)
            infeasible = Decision.deny(Code.INFEASIBLE, preview.infeasible)
            return await self._refuse(principal, tool.name, infeasible, started, details={"reason": preview.infeasible})
        if isinstance(reads, StoreUnavailableError):
            down = Decision.deny(Code.LEDGER_UNAVAILABLE, f"call history error: {reads.cause}")
            return await self._refuse(principal, tool.name, down, started)
        if isinstance(reads, Exception):
            raise reads
        provenance = self._memory.assess(tool, canonical, reads, session=session)
        verdict = decide_call(tool, principal, self._org_adapters, self._policy, canonical, tainted=provenance.tainted)
        if not verdict.decision.allowed:
            return await self._refuse(principal, tool.name, verdict.decision, started)
        proposal = _proposal(
            tool,
            version,
            args,
            canonical,
            principal,
            args_hash=bound_to,
            dedupe_key=dedupe_key,
            preview=preview,
            provenance=provenance,
            tainted_approvals=self._memory.tainted_approvals(principal.org),
            awaits_policy=self._policies.apply_to(tool.name) or verdict.approvals == AUTO,
            verdict=verdict,
        )
        try:
            created = await self._ledger.propose(proposal)
        except StoreUnavailableError as error:
            self._guard.invalidate()
            down = Decision.deny(Code.LEDGER_UNAVAILABLE, f"ledger error: {error.cause}")
            return await self._refuse(principal, tool.name, down, started)
        if created.status is TransitionStatus.ERR_NOT_DURABLE:
            # Maybe applied, not confirmed: not acknowledged. A retry finds the same card (dedupe).
            self._guard.invalidate()
            reason = f"card not confirmed durable ({'; '.join(created.problems)}); retry returns the same card"
            return await self._refuse(principal, tool.name, Decision.deny(Code.LEDGER_UNAVAILABLE, reason), started)
        if created.status is TransitionStatus.ERR_QUOTA_EXCEEDED:
            # No card was made. The agent learns the cap and its count, so it can wait or cancel one.
            counts = {"limit": created.extra["limit"], "open": created.extra["open"]}
            full = Decision.deny(Code.QUOTA_EXCEEDED, f"{counts['open']} open cards, cap {counts['limit']}")
            return await self._refuse(principal, tool.name, full, started, details=counts)
        card = created.card
        if card is None:
            raise RuntimeError(f"ledger answered {created.status} to a proposal")
        existing = created.status is TransitionStatus.EXISTING
        return await self._receipt(tool, principal, started, card, existing=existing, verdict=verdict)

    def _forbidden_either_way(self, tool: Tool, principal: Principal, canonical: dict[str, Any]) -> Decision | None:
        """The policies' denial of this write when it holds tainted or not (known before its provenance is)."""
        clean = decide_call(tool, principal, self._org_adapters, self._policy, canonical, tainted=False)
        if clean.decision.allowed:
            return None
        tainted = decide_call(tool, principal, self._org_adapters, self._policy, canonical, tainted=True)
        return None if tainted.decision.allowed else clean.decision

    async def _look(self, tool: Tool, args: BaseModel, principal: Principal) -> Preview | None:
        """The tool's preview of this write, or its preflight check (None), or nothing to look at."""
        if tool.preview is not None:
            return await self._invoker.preview(tool, args, self._invoker.context(tool, principal))
        if tool.preflight is not None:
            await tool.preflight(args, self._invoker.context(tool, principal))
        return None

    async def _receipt(
        self,
        tool: Tool,
        principal: Principal,
        started: float,
        card: Card,
        *,
        existing: bool,
        verdict: PolicyAnswer | None,
    ) -> Envelope:
        """The agent's receipt for its proposal's card, audited (with the policies that allowed it, if any);
        a new card first goes to the policy rules, and to the policy that approves it itself (`verdict`)."""
        count_proposal(tool.name, existing=existing)
        extra = {
            "card_id": card.card_id,
            "existing": str(existing).lower(),
            "state": card.state.value,
            **audit_fields(card.provenance),
        }
        if verdict is not None and verdict.policy_ids:
            extra["policies"] = ",".join(verdict.policy_ids)
        await self._record(principal, tool.name, "ok", started, action="card.propose", extra=extra)
        if not existing:  # a new card only: an existing one had its rules' say when it was made
            auto = verdict.auto_policy if verdict is not None and verdict.approvals == AUTO else None
            card = await self._policies.consider(card, auto_policy=auto)
        return Envelope.ok(card_for_agent(card, existing=existing), card_id=card.card_id)

    async def _repeat_of(self, principal: Principal, dedupe_key: str) -> Card | None:
        """The SUCCEEDED card this proposal repeats within its window; None too when the store cannot say."""
        try:
            return await self._ledger.repeated(principal.org, principal.subject, dedupe_key)
        except StoreUnavailableError:
            return None  # the proposal is refused as infeasible, which it is

    async def _spend(self, tool: Tool, principal: Principal, started: float) -> Envelope | None:
        """The refusal when `principal` has spent a budget this call needs (None: go on, one call spent)."""
        try:
            verdict = await self._limiter.spend(budget_owner(principal), charges_for(tool, principal, self._limits))
        except StoreUnavailableError as error:
            self._guard.invalidate()  # the same store keeps the ledger: let the next write check it again
            down = Decision.deny(Code.LEDGER_UNAVAILABLE, f"rate limiter error: {error.cause}")
            return await self._refuse(principal, tool.name, down, started)
        if verdict.allowed:
            return None
        return await self._refuse(principal, tool.name, _spent(verdict), started, details=_retry(verdict))

    async def _refuse_path(self, principal: Principal, name: str, error: PathArgumentError, started: float) -> Envelope:
        """An argument that would change the endpoint it fills: VALIDATION_ERROR, and nothing was sent."""
        invalid = Decision.deny(Code.VALIDATION_ERROR, str(error))
        problem = {"field": error.argument, "type": "path_segment", "message": "not usable as a path segment"}
        return await self._refuse(principal, name, invalid, started, details={"errors": [problem]})

    async def _refuse(
        self,
        principal: Principal,
        name: str,
        decision: Decision,
        started: float,
        *,
        details: Mapping[str, Any] | None = None,
        ran: bool = False,
    ) -> Envelope:
        code = decision.code or Code.INTERNAL_ERROR
        await self._record(
            principal, name, "error" if ran else "deny", started, code=code.value, reason=decision.reason
        )
        return Envelope.refused(code, details=details)

    async def _record(
        self,
        principal: Principal,
        name: str,
        outcome: str,
        started: float,
        *,
        code: str = "",
        reason: str = "",
        action: str = "tool.call",
        extra: Mapping[str, str] | None = None,
        read: tuple[Tool, str, bool] | None = None,
    ) -> bool:
        """Audit one call. Returns whether the event landed in the trail (and remembers it).

        With `read` (the tool, the history owner of an answered read, and whether its result showed the
        model third-party text), the read is remembered first or in the same step (`ReadMemory.remember_audited`).

        Raises:
            StoreUnavailableError: (`read` only) the read could not be remembered; nothing was audited
                or counted, so the caller's refusal is the call's one event.
        """
        seconds = self._clock() - started
        event = AuditEvent.by(
            principal,
            action=action,
            outcome=outcome,
            tool=name,
            code=code,
            reason=reason,
            latency_ms=seconds * 1000,
            extra=with_acting_client(principal, extra or {}),
        )
        if read is None:
            self._audited = await self._audit.record(event)
        else:
            self._audited = await self._memory.remember_audited(read[0], read[1], event, shown=read[2])
        # The one count per call, beside its one audit event. A name the catalog does not serve is
        # any string an agent sent: it is counted as unknown, never as a label of its own.
        count_tool_call(name if name in self._tools.current() else UNKNOWN_TOOL, code, seconds)
        annotate(code=code)
        return self._audited


def _proposal(
    tool: Tool,
    version: str,
    args: BaseModel,
    canonical: dict[str, Any],
    principal: Principal,
    *,
    args_hash: str,
    dedupe_key: str,
    preview: Preview | None,
    provenance: Provenance,
    tainted_approvals: int,
    awaits_policy: bool,
    verdict: PolicyAnswer,
) -> Proposal:
    """The card a proposal of `tool` (a write) with `args` (`canonical`: their JSON form) by `principal` files.

    Which approvers it needs (`policies.approval.approvals_required`, with the org's quorum for a tainted card),
    the summary and the agent's own words from the validated arguments, its decision and execution windows from
    the tool's approval policy.
    """
    approval, summary = tool.approval, tool.summary
    if approval is None or summary is None:  # Tool construction makes this unreachable
        raise RuntimeError(f"write tool {tool.name} has no approval policy")
    # A policy's @approval and @approver_role take the place of the tool's own (never fewer than one person:
    # an auto-approving policy is one approver of the quorum, recorded by the ledger as policy:<id>).
    if verdict.approvals is not None or verdict.approver_role is not None:
        approval = dataclasses.replace(
            approval,
            required=max(verdict.approvals or 1, 1),
            approver_role=verdict.approver_role or approval.approver_role,
        )
    return Proposal(
        tool=tool.name,
        tool_version=version,
        arguments=canonical,
        args_hash=args_hash,
        requester_subject=principal.subject,
        requester_org=principal.org,
        requester_key_id=principal.key_id,
        requester_roles=principal.roles,
        acting_client=principal.acting_client,
        actors=principal.actors,
        approvals_required=approvals_required(
            approval, canonical, tainted=provenance.tainted, tainted_approvals=tainted_approvals
        ),
        approver_role=approval.approver_role,
        summary=summary(args),
        agent_text={field: str(canonical[field]) for field in sorted(tool.agent_text_fields)},
        decide_within_ms=int(approval.decide_within_seconds * 1000),
        execute_within_ms=int(approval.execute_within_seconds * 1000),
        dedupe_key=dedupe_key,
        preview=preview,
        awaits_policy=awaits_policy,
        provenance=provenance,
    )


def _people_read_third_party_text(tool: Tool) -> bool:
    """Whether a render of `tool`'s output for people may carry third-party text (marked, or any string the
    output does not declare trusted; the answer is cached per output model)."""
    return tool.emits_untrusted_text or holds_third_party_text(tool.output)


def with_acting_client(principal: Principal, extra: Mapping[str, str]) -> Mapping[str, str]:
    """A delegated call's event names the agent beside the person it acts for (`gateway.executor.tasks` too)."""
    return {**extra, "acting_client": principal.acting_client} if principal.acting_client else extra


def _spent(verdict: RateVerdict) -> Decision:
    """A budget's refusal as the audit reads it; the caller reads RATE_LIMITED with `_retry`."""
    return Decision.deny(Code.RATE_LIMITED, f"{verdict.bucket} budget spent; retry after {verdict.retry_after:g} s")


def _retry(verdict: RateVerdict) -> dict[str, Any]:
    return {"retry_after": verdict.retry_after}


def _failure(error: UpstreamError) -> Decision:
    """The refusal for a failed call. A backend's own words (its refusal code) go in the reason, which only
    the audit keeps: the model gets the code of our vocabulary and its fixed message, nothing the backend wrote."""
    backend = f" (backend: {error.reason})" if isinstance(error, UpstreamRefusedError) and error.reason else ""
    return Decision.deny(Code(error.code), f"{type(error).__name__}: {error}{backend}")


def _wait(error: UpstreamError) -> dict[str, Any] | None:
    """What the model is told of a backend's own rate limit: how long it asked callers to wait."""
    return {"retry_after": error.retry_after} if isinstance(error, UpstreamRateLimitedError) else None


def _error_summary(error: ValidationError) -> list[dict[str, Any]]:
    """Field-level problems without echoing the input back (it may be long or hostile)."""
    return [
        {"field": ".".join(str(part) for part in item["loc"]), "type": item["type"], "message": item["msg"]}
        for item in error.errors(include_url=False, include_input=False)
    ]


_KNOWN_NAME_CHARS = 64
"""Argument names up to this long have their `is_key_field` verdict remembered: a bounded cache of
bounded names, so an agent cannot pin large strings in memory with it."""


def _key_fields(arguments: Iterable[str]) -> list[str]:
    """The argument names that would let the caller choose an idempotency key (`is_key_field`), sorted."""
    return sorted(name for name in arguments if _is_key_field(name))


def _minted_keys(fields: Iterable[str]) -> dict[str, Any]:
    """The refusal's details for `_key_fields`: keys are the gateway's."""
    message = "idempotency keys are minted by the gateway"
    return {"errors": [{"field": f, "type": "server_minted_key", "message": message} for f in fields]}


def _is_key_field(name: str) -> bool:
    # Remembered: every call of a tool sends the same few names, and each check lowercases, strips and searches.
    return _remembered_key_field(name) if len(name) <= _KNOWN_NAME_CHARS else is_key_field(name)


@functools.lru_cache(maxsize=1024)
def _remembered_key_field(name: str) -> bool:
    return is_key_field(name)
