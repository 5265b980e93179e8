"""The agent's path: one ``tools/call`` from access check to sealed envelope.

Who calls it: the MCP surface, once per ``tools/call``, with the authenticated principal, the tool
name and the raw arguments the model proposed. It returns a sealed `Envelope`, never raises for
anything a caller did, and audits every call exactly once.

The order of the steps in `AgentPath._execute` is the specification: access (the same function the
catalog lists with) -> refuse agent-chosen keys -> validate the arguments -> the approval gate (a
write only ever becomes a card) -> backend health -> invoke -> withhold untrusted text -> seal.

Whatever a backend writes is third-party text. A failure reaches the model as a `Code` and its fixed
message only; the backend's refusal code goes to the audit event's reason, for people.
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
from gateway.errors import PathArgumentError, StoreUnavailableError, UpstreamError, UpstreamRefusedError
from gateway.executor.invoke import Invoker, args_hash
from gateway.ledger import DurabilityGuard, Ledger, Proposal, TransitionStatus
from gateway.org_adapters import OrgAdapters
from gateway.principal import Principal
from gateway.printable import escape_unprintable
from gateway.tool import Mode, Tool, is_key_field
from gateway.toolbox import ToolSource
from gateway.untrusted import withhold_untrusted
from policies.access import decide_access
from policies.approval import approvals_required

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
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._tools = tools
        self._org_adapters = org_adapters
        self._audit = audit
        self._invoker = invoker
        self._ledger = ledger
        self._guard = guard
        self._healthy = healthy
        self._clock = clock

    async def execute(self, principal: Principal, name: str, arguments: Mapping[str, Any] | None) -> Envelope:
        """Run tool `name` for `principal`. Every outcome is an envelope and one audit event.

        A bug in an adapter (or here) is logged with its traceback, audited as INTERNAL_ERROR, and
        answered with that code: the caller never sees a stack trace.
        """
        started = self._clock()
        try:
            return await self._execute(principal, name, arguments, started)
        except Exception:
            logger.exception("tool %s failed unexpectedly", escape_unprintable(name))
            failure = Decision.deny(Code.INTERNAL_ERROR, "unexpected error; see the gateway log")
            return await self._refuse(principal, name, failure, started, ran=True)

    async def _execute(
        self, principal: Principal, name: str, arguments: Mapping[str, Any] | None, started: float
    ) -> Envelope:
        toolbox = self._tools.current()
        tool = toolbox.get(name)

        # 1. Access: the same function the catalog uses. An unknown name and a forbidden one
        #    answer identically, so the catalog cannot be probed.
        decision = _UNKNOWN_TOOL if tool is None else decide_access(tool, principal, self._org_adapters)
        if tool is None or not decision.allowed:
            return await self._refuse(principal, name, decision, started)

        # 2. Input validation against the same closed model the catalog's schema came from. An
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

        # 3. Approval gate: a write never executes on an agent's call. The most it can do is
        #    create a card bound to the ledger, which a person must approve.
        if tool.mode is Mode.WRITE:
            return await self._propose(tool, toolbox.version(tool.name), args, principal, started)

        # A backend known to be down fails fast instead of holding the caller to the deadline.
        if not self._healthy(tool.adapter):
            down = Decision.deny(Code.UPSTREAM_UNAVAILABLE, f"adapter {tool.adapter} is unhealthy")
            return await self._refuse(principal, name, down, started, ran=True)

        # 4. Execute with the tool's deadline; 5. validate the output; 6. seal.
        try:
            output = await self._invoker.invoke(tool, args, self._invoker.context(tool, principal))
        except PathArgumentError as error:
            return await self._refuse_path(principal, name, error, started)
        except UpstreamError as error:
            return await self._refuse(principal, name, _failure(error), started, ran=True)
        safe = withhold_untrusted(output)
        model = tool.model_view(safe) if tool.model_view is not None else safe.model_dump(mode="json")
        human = tool.human_view(output) if tool.human_view is not None else None
        await self._record(principal, name, "ok", started, reason=decision.reason)
        return Envelope.ok(model, human=human, untrusted=tool.emits_untrusted_text)

    async def _propose(
        self, tool: Tool, version: str, args: BaseModel, principal: Principal, started: float
    ) -> Envelope:
        """Create (or find the open) card for a write proposal. Nothing is sent to any backend."""
        if not await self._guard.writable():
            down = Decision.deny(Code.LEDGER_UNAVAILABLE, "ledger is not durable or unreachable")
            return await self._refuse(principal, tool.name, down, started)
        if tool.preflight is not None:
            # The target must be one this caller was shown (its own booking, its org's order).
            try:
                await tool.preflight(args, self._invoker.context(tool, principal))
            except PathArgumentError as error:
                return await self._refuse_path(principal, tool.name, error, started)
            except UpstreamError as error:
                return await self._refuse(principal, tool.name, _failure(error), started, ran=True)
        approval, summary = tool.approval, tool.summary
        if approval is None or summary is None:  # Tool construction makes this unreachable
            raise RuntimeError(f"write tool {tool.name} has no approval policy")
        canonical = args.model_dump(mode="json")
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
            approvals_required=approvals_required(approval, canonical),
            approver_role=approval.approver_role,
            summary=summary(args),
            agent_text={field: str(canonical[field]) for field in sorted(tool.agent_text_fields)},
            decide_within_ms=int(approval.decide_within_seconds * 1000),
            execute_within_ms=int(approval.execute_within_seconds * 1000),
            dedupe_key=f"{principal.org}|{principal.subject}|{tool.name}|{bound_to}",
        )
        try:
            created = await self._ledger.propose(proposal)
        except StoreUnavailableError as error:
            self._guard.invalidate()
            down = Decision.deny(Code.LEDGER_UNAVAILABLE, f"ledger error: {error.cause}")
            return await self._refuse(principal, tool.name, down, started)
        card = created.card
        if card is None:
            raise RuntimeError(f"ledger answered {created.status} to a proposal")
        existing = created.status is TransitionStatus.EXISTING
        extra = {"card_id": card.card_id, "existing": str(existing).lower()}
        await self._record(principal, tool.name, "ok", started, action="card.propose", extra=extra)
        return Envelope.ok(card_for_agent(card, existing=existing))

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
    ) -> None:
        await self._audit.record(
            AuditEvent(
                action=action,
                outcome=outcome,
                subject=principal.subject,
                org=principal.org,
                key_id=principal.key_id,
                tool=name,
                code=code,
                reason=reason,
                latency_ms=(self._clock() - started) * 1000,
                extra=_with_acting_client(principal, extra or {}),
            )
        )


def _with_acting_client(principal: Principal, extra: Mapping[str, str]) -> Mapping[str, str]:
    """A delegated call's event names the agent beside the person it acts for."""
    return {**extra, "acting_client": principal.acting_client} if principal.acting_client else extra


def _failure(error: UpstreamError) -> Decision:
    """The refusal for a failed call. A backend's own words (its refusal code) go in the reason, which only
    the audit keeps: the model gets the code of our vocabulary and its fixed message, nothing the backend wrote."""
    backend = f" (backend: {error.reason})" if isinstance(error, UpstreamRefusedError) and error.reason else ""
    return Decision.deny(Code(error.code), f"{type(error).__name__}: {error}{backend}")


def _error_summary(error: ValidationError) -> list[dict[str, Any]]:
    """Field-level problems without echoing the input back (it may be long or hostile)."""
    return [
        {"field": ".".join(str(part) for part in item["loc"]), "type": item["type"], "message": item["msg"]}
        for item in error.errors(include_url=False, include_input=False)
    ]
