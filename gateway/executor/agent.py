"""The agent's path: one ``tools/call`` from access check to sealed envelope.

Who calls it: the MCP surface, once per ``tools/call``, with the authenticated principal, the tool
name and the raw arguments the model proposed. It returns a sealed `Envelope`, never raises for
anything a caller did, and audits every call exactly once.

The order of the steps in `AgentPath._execute` is the specification: access (the same function the
catalog lists with) -> rate budgets -> refuse agent-chosen keys -> validate the arguments -> the
approval gate (a write only ever becomes a card, after its preview
found it feasible, with its provenance) -> backend health -> invoke -> withhold untrusted
text -> remember the read -> seal.

Provenance (`gateway.provenance`): every answered read is remembered for its MCP session, or for
its principal when the client holds none, one round trip per read; a read that cannot be
remembered is not answered, so a store that fails can never hide a read of untrusted text from the
card that follows it. A proposal reads that history back and carries `policies.provenance.assess`'s
verdict on its card and in its audit event; a tainted one needs the org's tainted quorum.

Rate budgets come right after access. An unknown or forbidden name is refused before it costs
anything: it reads as PERMISSION_DENIED whatever the caller's budget, so the budget cannot be used
to probe the catalog, and it reaches no backend and no approver, which is what the budgets protect
(it costs its audit write either way). Everything after access spends, invalid arguments
included: an agent looping on a malformed call is a runaway like any other. The budgets are the
requester's (org and subject), shared by all its keys (`policies.rate_budgets`); a store that
cannot answer fails the call closed, as LEDGER_UNAVAILABLE.

Whatever a backend writes is third-party text. A failure reaches the model as a `Code` and its fixed
message only; the backend's refusal code goes to the audit event's reason, for people.

Fail closed (ARCHITECTURE invariant 7). A proposal is acknowledged only once the ledger confirmed
its card durable; ``ERR_NOT_DURABLE`` is LEDGER_UNAVAILABLE (retryable), and the same call made
again once the ledger is durable answers with the same card (dedupe), never a second one. A read is
answered only while it can be audited: when the audit trail cannot be written (Redis is gone), its
result is withheld and the call refused with LEDGER_UNAVAILABLE, and until an audit append lands
again every call is refused before it reaches a backend (each refusal's own audit append is the
probe that finds Redis back).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from gateway.audit import AuditEvent, AuditSink
from gateway.card_views import card_for_agent
from gateway.codes import Code
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
from gateway.executor.read_memory import ReadMemory, audit_fields
from gateway.ledger import DurabilityGuard, Ledger, Proposal, TransitionStatus
from gateway.limiter import RateLimiter
from gateway.limits import Limits
from gateway.metrics import UNKNOWN_TOOL, count_proposal, count_tool_call
from gateway.org_adapters import OrgAdapters
from gateway.preview import Preview
from gateway.principal import Principal
from gateway.printable import escape_unprintable
from gateway.provenance import history_owner
from gateway.tool import Mode, Tool, is_key_field
from gateway.toolbox import ToolSource
from gateway.tracing import annotate
from gateway.untrusted import withhold_untrusted
from policies.access import decide_access
from policies.approval import approvals_required
from policies.rate_budgets import budget_owner, charges_for

__all__ = ["AgentPath"]

logger = logging.getLogger(__name__)

_UNKNOWN_TOOL = Decision.deny(Code.PERMISSION_DENIED, "unknown tool")


class AgentPath:
    """Runs reads and files write proposals for principals."""

    def __init__(
        self,
        *,
        tools: ToolSource,
        org_adapters: OrgAdapters,
        audit: AuditSink,
        invoker: Invoker,
        ledger: Ledger,
        guard: DurabilityGuard,
        healthy: Callable[[str], bool],
        limiter: RateLimiter,
        limits: Limits,
        memory: ReadMemory,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._tools = tools
        self._org_adapters = org_adapters
        self._audit = audit
        self._invoker = invoker
        self._ledger = ledger
        self._guard = guard
        self._healthy = healthy
        self._limiter = limiter
        self._limits = limits
        self._clock = clock
        self._memory = memory
        self._audited = True
        """Whether the last audit append landed in the trail: while it did not, reads are refused up front."""

    async def execute(
        self, principal: Principal, name: str, arguments: Mapping[str, Any] | None, *, session: str | None = None
    ) -> Envelope:
        """Run tool `name` for `principal`. Every outcome is an envelope and one audit event.

        `session` is the MCP session the call came in (2025-11-25 era), None for a stateless client:
        it says whose history of reads the call joins (`gateway.provenance.history_owner`).

        A bug in an adapter (or here) is logged with its traceback, audited as INTERNAL_ERROR, and
        answered with that code: the caller never sees a stack trace.
        """
        started = self._clock()
        try:
            return await self._execute(
                principal, name, arguments, started, history_owner(principal.org, principal.subject, session)
            )
        except Exception:
            logger.exception("tool %s failed unexpectedly", escape_unprintable(name))
            failure = Decision.deny(Code.INTERNAL_ERROR, "unexpected error; see the gateway log")
            return await self._refuse(principal, name, failure, started, ran=True)

    async def _execute(
        self, principal: Principal, name: str, arguments: Mapping[str, Any] | None, started: float, owner: str
    ) -> Envelope:
        toolbox = self._tools.current()
        tool = toolbox.get(name)

        # 1. Access: the same function the catalog uses. An unknown name and a forbidden one
        #    answer identically, so the catalog cannot be probed.
        decision = _UNKNOWN_TOOL if tool is None else decide_access(tool, principal, self._org_adapters)
        if tool is None or not decision.allowed:
            return await self._refuse(principal, name, decision, started)

        # 2. Rate budgets: the requester's class budget and the tool's own, in one atomic check.
        over = await self._spend(tool, principal, started)
        if over is not None:
            return over

        # 3. Input validation against the same closed model the catalog's schema came from. An
        #    agent that tries to choose an idempotency key is told keys are the gateway's.
        supplied_keys = sorted(field for field in (arguments or {}) if is_key_field(field))
        if supplied_keys:
            refusal = Decision.deny(Code.VALIDATION_ERROR, "agent supplied an idempotency key")
            details = {
                "errors": [
                    {"field": f, "type": "server_minted_key", "message": "idempotency keys are minted by the gateway"}
                    for f in supplied_keys
                ]
            }
            return await self._refuse(principal, name, refusal, started, details=details)
        try:
            args = tool.arguments.model_validate(arguments or {})
        except ValidationError as error:
            invalid = Decision.deny(Code.VALIDATION_ERROR, f"{error.error_count()} invalid argument(s)")
            return await self._refuse(principal, name, invalid, started, details={"errors": _error_summary(error)})

        # 4. Approval gate: a write never executes on an agent's call. The most it can do is
        #    create a card bound to the ledger, which a person must approve.
        if tool.mode is Mode.WRITE:
            return await self._propose(tool, toolbox.version(tool.name), args, principal, started, owner)

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
        if not await self._remember(tool, owner):
            down = Decision.deny(Code.LEDGER_UNAVAILABLE, "the read could not be remembered for provenance")
            return await self._refuse(principal, name, down, started, ran=True)  # the result is withheld
        if not await self._record(principal, name, "ok", started, reason=decision.reason):
            return Envelope.refused(Code.LEDGER_UNAVAILABLE)  # the result is withheld: it was not audited
        return Envelope.ok(model, human=human, untrusted=tool.emits_untrusted_text)

    async def _propose(
        self, tool: Tool, version: str, args: BaseModel, principal: Principal, started: float, owner: str
    ) -> Envelope:
        """Create (or find the open) card for a write proposal. Nothing is sent to any backend."""
        if not await self._guard.writable():
            down = Decision.deny(Code.LEDGER_UNAVAILABLE, "ledger is not durable or unreachable")
            return await self._refuse(principal, tool.name, down, started)
        # The target must be one this caller was shown (its own booking, its org's order). A preview
        # checks that and reads what the write will change, in one read; a backend that cannot
        # answer refuses the proposal (retryably): no card is filed without its preview.
        preview: Preview | None = None
        try:
            if tool.preview is not None:
                preview = await self._invoker.preview(tool, args, self._invoker.context(tool, principal))
            elif tool.preflight is not None:
                await tool.preflight(args, self._invoker.context(tool, principal))
        except PathArgumentError as error:
            return await self._refuse_path(principal, tool.name, error, started)
        except UpstreamError as error:
            return await self._refuse(principal, tool.name, _failure(error), started, ran=True, details=_wait(error))
        if preview is not None and preview.infeasible is not None:
            # The backend would certainly refuse it: no card for a person to approve in vain.
            infeasible = Decision.deny(Code.INFEASIBLE, preview.infeasible)
            return await self._refuse(principal, tool.name, infeasible, started, details={"reason": preview.infeasible})
        approval, summary = tool.approval, tool.summary
        if approval is None or summary is None:  # Tool construction makes this unreachable
            raise RuntimeError(f"write tool {tool.name} has no approval policy")
        canonical = args.model_dump(mode="json")
        try:
            provenance = await self._memory.provenance(tool, canonical, owner)
        except StoreUnavailableError as error:
            down = Decision.deny(Code.LEDGER_UNAVAILABLE, f"call history error: {error.cause}")
            return await self._refuse(principal, tool.name, down, started)
        bound_to = args_hash(tool.name, version, canonical)
        proposal = Proposal(
            tool=tool.name,
            tool_version=version,
            arguments=canonical,
            args_hash=bound_to,
            requester_subject=principal.subject,
            requester_org=principal.org,
            requester_key_id=principal.key_id,
            requester_roles=principal.roles,
            acting_client=principal.acting_client,
            actors=principal.actors,
            approvals_required=approvals_required(
                approval,
                canonical,
                tainted=provenance.tainted,
                tainted_approvals=self._memory.tainted_approvals(principal.org),
            ),
            approver_role=approval.approver_role,
            summary=summary(args),
            agent_text={field: str(canonical[field]) for field in sorted(tool.agent_text_fields)},
            decide_within_ms=int(approval.decide_within_seconds * 1000),
            execute_within_ms=int(approval.execute_within_seconds * 1000),
            dedupe_key=f"{principal.org}|{principal.subject}|{tool.name}|{bound_to}",
            preview=preview,
            provenance=provenance,
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
        count_proposal(tool.name, existing=existing)
        extra = {"card_id": card.card_id, "existing": str(existing).lower(), **audit_fields(card.provenance)}
        await self._record(principal, tool.name, "ok", started, action="card.propose", extra=extra)
        return Envelope.ok(card_for_agent(card, existing=existing), card_id=card.card_id)

    async def _remember(self, tool: Tool, owner: str) -> bool:
        """Remember this answered read for provenance; False when the store could not take it."""
        try:
            await self._memory.remember(tool, owner)
        except StoreUnavailableError:
            self._guard.invalidate()  # the same store keeps the ledger: let the next write check it again
            return False
        return True

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
        spent = Decision.deny(
            Code.RATE_LIMITED, f"{verdict.bucket} budget spent; retry after {verdict.retry_after:g} s"
        )
        return await self._refuse(principal, tool.name, spent, started, details={"retry_after": verdict.retry_after})

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
    ) -> bool:
        """Audit one call. Returns whether the event landed in the trail (and remembers it)."""
        seconds = self._clock() - started
        # The one count per call, beside its one audit event. A name the catalog does not serve is
        # any string an agent sent: it is counted as unknown, never as a label of its own.
        count_tool_call(name if name in self._tools.current() else UNKNOWN_TOOL, code, seconds)
        annotate(code=code)
        self._audited = await self._audit.record(
            AuditEvent(
                action=action,
                outcome=outcome,
                subject=principal.subject,
                org=principal.org,
                key_id=principal.key_id,
                tool=name,
                code=code,
                reason=reason,
                latency_ms=seconds * 1000,
                extra=_with_acting_client(principal, extra or {}),
            )
        )
        return self._audited


def _with_acting_client(principal: Principal, extra: Mapping[str, str]) -> Mapping[str, str]:
    """A delegated call's event names the agent beside the person it acts for."""
    return {**extra, "acting_client": principal.acting_client} if principal.acting_client else extra


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
