"""The executor: the only code path that runs a tool.

Who calls it: the MCP surface, once per ``tools/call``, with the authenticated principal, the tool
name and the raw arguments the model proposed (`execute`); and the worker, with the id of an
approved card (`run_approved`) or of a write whose outcome is unknown (`reconcile`). It returns
sealed envelopes or cards, never raises for anything a caller did, and audits every decision.

What it asks of its collaborators: the `Toolbox` (declarations), `OrgAdapters` (operator config), an
`AuditSink`, one HTTP client per adapter (handed to adapters through `ToolContext`), the
`Ledger` and its `LedgerGuard` (writes only while the ledger is durable), and the key store
(to re-check a requester's live key before a write runs).

What it deliberately does not know: transports (no MCP, no Starlette), bearer tokens (a
`Principal` has none), and any particular tool (no per-tool branches). The order of the steps in
`execute` and `_send` is the specification.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from gateway.audit import AuditEvent, AuditSink
from gateway.canonical import canonical_json
from gateway.card import Card, CardState
from gateway.card_views import card_for_agent
from gateway.codes import Code
from gateway.decision import Decision
from gateway.envelope import Envelope
from gateway.errors import (
    StoreUnavailableError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamRefusedError,
    UpstreamTimeoutError,
)
from gateway.identity import IdentityHeaders
from gateway.ledger import Ledger, Proposal, TransitionStatus
from gateway.org_adapters import OrgAdapters
from gateway.principal import Principal
from gateway.store.durability import LedgerGuard
from gateway.store.keys import KeyRecord
from gateway.tool import Mode, Tool, is_key_field
from gateway.tool_context import CallerCards, ToolContext
from gateway.toolbox import Toolbox, ToolSource
from gateway.untrusted import withhold_untrusted
from gateway.upstream import UpstreamClient
from policies.access import decide_access
from policies.approval import approvals_required
from policies.outcome import Attempt, Next, backoff_ms, classify, reconcile_step

__all__ = ["Executor"]

logger = logging.getLogger(__name__)

_UNKNOWN_TOOL = Decision.deny(Code.PERMISSION_DENIED, "unknown tool")
KeyLookup = Callable[[str], Awaitable[KeyRecord | None]]


class Executor:
    """Runs tools for principals, and approved cards for the worker."""

    def __init__(
        self,
        *,
        tools: ToolSource,
        org_adapters: OrgAdapters,
        audit: AuditSink,
        clients: Mapping[str, UpstreamClient],
        ledger: Ledger | None = None,
        guard: LedgerGuard | None = None,
        keys: KeyLookup | None = None,
        healthy: Callable[[str], bool] | None = None,
        lease_ms: int = 30_000,
        identity: Callable[[Principal, str], Mapping[str, str]] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._tools = tools
        self._org_adapters = org_adapters
        self._audit = audit
        self._clients = clients
        self._ledger = ledger
        self._guard = guard
        self._keys = keys
        self._lease_ms = lease_ms
        self._identity = identity or IdentityHeaders()
        self._healthy = healthy or (lambda adapter: True)
        self._clock = clock

    # -- the agent's path --------------------------------------------------------------------------

    async def execute(self, principal: Principal, name: str, arguments: Mapping[str, Any] | None) -> Envelope:
        """Run tool `name` for `principal`. Every outcome is an envelope and one audit event.

        A bug in an adapter (or here) is logged with its traceback, audited as INTERNAL_ERROR, and
        answered with that code: the caller never sees a stack trace.
        """
        started = self._clock()
        try:
            return await self._execute(principal, name, arguments, started)
        except Exception:
            logger.exception("tool %s failed unexpectedly", name)
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
            output = await self._invoke(tool, args, self._context(tool, principal))
        except UpstreamError as error:
            return await self._refuse(principal, name, _failure(error), started, details=_details(error), ran=True)
        safe = withhold_untrusted(output)
        model = tool.model_view(safe) if tool.model_view is not None else safe.model_dump(mode="json")
        human = tool.human_view(output) if tool.human_view is not None else None
        await self._record(principal, name, "ok", started, reason=decision.reason)
        return Envelope.ok(model, human=human, untrusted=tool.emits_untrusted_text)

    async def _propose(
        self, tool: Tool, version: str, args: BaseModel, principal: Principal, started: float
    ) -> Envelope:
        """Create (or find the open) card for a write proposal. Nothing is sent to any backend."""
        if self._ledger is None or self._guard is None or not await self._guard.writable():
            down = Decision.deny(Code.LEDGER_UNAVAILABLE, "ledger is not durable or unreachable")
            return await self._refuse(principal, tool.name, down, started)
        if tool.preflight is not None:
            # The target must be one this caller was shown (its own booking, its org's order).
            try:
                await tool.preflight(args, self._context(tool, principal))
            except UpstreamError as error:
                return await self._refuse(principal, tool.name, _failure(error), started, ran=True)
        approval, summary = tool.approval, tool.summary
        if approval is None or summary is None:  # Tool construction makes this unreachable
            raise RuntimeError(f"write tool {tool.name} has no approval policy")
        canonical = args.model_dump(mode="json")
        args_hash = _args_hash(tool.name, version, canonical)
        proposal = Proposal(
            tool=tool.name,
            tool_version=version,
            arguments=canonical,
            args_hash=args_hash,
            requester_subject=principal.subject,
            requester_org=principal.org,
            requester_key_id=principal.key_id,
            requester_roles=principal.roles,
            approvals_required=approvals_required(approval, canonical),
            approver_role=approval.approver_role,
            summary=summary(args),
            agent_text={field: str(canonical[field]) for field in sorted(tool.agent_text_fields)},
            decide_within_ms=int(approval.decide_within_seconds * 1000),
            execute_within_ms=int(approval.execute_within_seconds * 1000),
            dedupe_key=f"{principal.org}|{principal.subject}|{tool.name}|{args_hash}",
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
        await self._record(
            principal,
            tool.name,
            "ok",
            started,
            action="card.propose",
            extra={"card_id": card.card_id, "existing": str(existing).lower()},
        )
        return Envelope.ok(card_for_agent(card, existing=existing))

    # -- the worker's path -------------------------------------------------------------------------

    async def run_approved(self, card_id: str, *, worker: str) -> Card | None:
        """Claim an approved card and run its write once. Returns the card as it ends up."""
        ledger = self._require_ledger()
        card = await ledger.get(card_id)
        if card is None or card.state is not CardState.APPROVED:
            return card
        # Deferrals are not failures: the card stays APPROVED and the sweeper enqueues it again.
        if self._guard is not None and not await self._guard.writable():
            await self._record_card(card, "card.execute", "DEFERRED", "ledger not durable or unreachable")
            return card
        tool = self._tools.current().get(card.tool)
        if tool is not None and not self._healthy(tool.adapter):
            await self._record_card(card, "card.execute", "DEFERRED", f"adapter {tool.adapter} is unhealthy")
            return card
        claim = await ledger.claim(card_id, worker=worker, lease_ms=self._lease_ms)
        if claim.status is not TransitionStatus.OK or claim.card is None:
            return claim.card
        return await self._send(claim.card)

    async def reconcile(self, card_id: str, *, worker: str) -> Card | None:
        """Resolve an UNKNOWN write by asking the backend, by its idempotency key, what happened."""
        ledger = self._require_ledger()
        card = await ledger.get(card_id)
        tool = self._tools.current().get(card.tool) if card is not None else None
        if card is None or card.state is not CardState.UNKNOWN:
            return card
        if tool is None or tool.write_contract is None:
            result = await ledger.reconcile(
                card_id, result="NEEDS_RECONCILIATION", reference="", evidence={"reason": "tool no longer served"}
            )
            return result.card
        contract = tool.write_contract
        ctx = self._context(tool, _requester(card), idempotency_key=card.idempotency_key)
        try:
            status = await contract.status_lookup(card.idempotency_key, ctx)
        except UpstreamError:
            status = None
        now_ms = await ledger.server_time_ms()
        dispatched_ms = card.dispatched_ms or card.created_ms
        step = reconcile_step(status, contract, now_ms=now_ms, dispatched_ms=dispatched_ms)
        evidence: dict[str, Any] = {"reason": step.reason}
        if status is not None:
            evidence["status"] = status.state
            evidence["backend"] = dict(status.detail)
        if step.next is Next.RESEND:
            resend = await ledger.claim_resend(card_id, worker=worker, lease_ms=self._lease_ms)
            return (
                await self._send(resend.card) if resend.status is TransitionStatus.OK and resend.card else resend.card
            )
        reference = status.reference or "" if status is not None else ""
        result = await ledger.reconcile(
            card_id, result=step.next.value, reference=reference, evidence=evidence, next_at_ms=step.at_ms
        )
        if step.next is not Next.RESCHEDULE:
            await self._record_card(result.card or card, "card.reconcile", step.next.value, step.reason)
        return result.card

    async def _send(self, card: Card) -> Card | None:
        """Run a claimed card: re-check, bind, record DISPATCHED, send once with its key, classify."""
        ledger = self._require_ledger()
        toolbox = self._tools.current()
        tool = toolbox.get(card.tool)

        # 1. Re-check what was true at proposal: the tool, its definition, the arguments, access.
        refusal = await self._binding_refusal(card, tool, toolbox)
        if refusal is not None or tool is None or tool.write_contract is None:
            reason = refusal.reason if refusal is not None else "tool not served"
            code = refusal.code.value if refusal is not None and refusal.code else Code.PERMISSION_DENIED.value
            done = await ledger.complete(
                card.card_id,
                fence=card.fence,
                outcome=CardState.FAILED,
                reference="",
                evidence={"code": code, "reason": reason, "sent": False},
                settle_ms=0,
            )
            await self._record_card(card, "card.execute", "FAILED", reason, code=code)
            return done.card
        contract = tool.write_contract
        args = tool.arguments.model_validate(card.arguments)

        # 2. DISPATCHED is recorded before anything is sent: a crash after this point is UNKNOWN.
        dispatched = await ledger.dispatch(card.card_id, fence=card.fence)
        if dispatched.status is TransitionStatus.ERR_NOT_DURABLE:
            # DISPATCHED is not on disk: sending now could not be accounted for after a crash.
            released = await ledger.release(card.card_id, fence=card.fence, reason="ledger fsync unconfirmed",
                                            requeue_ms=backoff_ms(card.attempts))  # fmt: skip
            await self._record_card(card, "card.execute", "NOT_SENT", "ledger fsync unconfirmed; will retry")
            return released.card
        if dispatched.status is not TransitionStatus.OK:
            return dispatched.card  # the lease was lost: another worker owns the card now

        # 3. Send once, with the key minted when the card was created.
        ctx = self._context(tool, _requester(card), idempotency_key=card.idempotency_key)
        error: UpstreamError | None = None
        reference = ""
        try:
            output = await self._invoke(tool, args, ctx)
            reference = str(getattr(output, contract.reference_field, "") or "")
        except UpstreamError as caught:
            error = caught

        # 4. Classify the attempt by policy; nothing that may have landed is ever resent blindly.
        attempt = classify(error, contract)
        evidence = {"error": type(error).__name__, "status": error.status} if error is not None else {}
        if attempt is Attempt.NOT_SENT:
            released = await ledger.release(
                card.card_id, fence=card.fence, reason=type(error).__name__, requeue_ms=backoff_ms(card.attempts)
            )
            await self._record_card(card, "card.execute", "NOT_SENT", "nothing reached the backend; will retry")
            return released.card
        outcome = CardState(attempt.value)
        done = await ledger.complete(
            card.card_id,
            fence=card.fence,
            outcome=outcome,
            reference=reference,
            evidence=evidence,
            settle_ms=int(contract.settle_seconds * 1000),
        )
        await self._record_card(card, "card.execute", attempt.value, type(error).__name__ if error else "")
        return done.card

    async def _binding_refusal(self, card: Card, tool: Tool | None, toolbox: Toolbox) -> Decision | None:
        if tool is None:
            return Decision.deny(Code.PERMISSION_DENIED, "tool is no longer served")
        if toolbox.version(tool.name) != card.tool_version:
            return Decision.deny(Code.CONFLICT, "tool definition changed since the card was proposed")
        if _args_hash(tool.name, card.tool_version, card.arguments) != card.args_hash:
            return Decision.deny(Code.CONFLICT, "arguments do not match the approved args_hash")
        record = await self._keys(card.requester_key_id) if self._keys is not None else None
        if record is None or record.revoked:
            return Decision.deny(Code.PERMISSION_DENIED, "requester's key is revoked or unknown")
        access = decide_access(tool, record.principal(), self._org_adapters)
        return None if access.allowed else access

    # -- shared steps ------------------------------------------------------------------------------

    async def _invoke(self, tool: Tool, args: BaseModel, ctx: ToolContext) -> BaseModel:
        """Execute within the tool's deadline and validate the answer against its output model."""
        try:
            async with asyncio.timeout(tool.timeout_seconds):
                raw = await tool.execute(args, ctx)
        except TimeoutError as error:
            raise UpstreamTimeoutError(f"no answer within {tool.timeout_seconds}s", service=tool.adapter) from error
        try:
            return tool.output.model_validate(raw.model_dump() if isinstance(raw, BaseModel) else raw)
        except ValidationError as error:
            raise UpstreamProtocolError(
                f"backend answer failed {error.error_count()} output check(s)", service=tool.adapter, status=200
            ) from error

    def _context(self, tool: Tool, principal: Principal, *, idempotency_key: str | None = None) -> ToolContext:
        cards = _CallerCards(self._ledger, principal) if self._ledger is not None else None
        return ToolContext(
            principal=principal,
            http=self._clients.get(tool.adapter),
            service=tool.adapter,
            idempotency_key=idempotency_key,
            cards=cards,
            identity=self._identity(principal, tool.adapter),
        )

    def _require_ledger(self) -> Ledger:
        if self._ledger is None:
            raise RuntimeError("this executor has no ledger")
        return self._ledger

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
                extra=extra or {},
            )
        )

    async def _record_card(self, card: Card, action: str, outcome: str, reason: str, *, code: str = "") -> None:
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


class _CallerCards(CallerCards):
    """The built-in approvals tools' view of the ledger, bound to one principal."""

    def __init__(self, ledger: Ledger, principal: Principal) -> None:
        self._ledger = ledger
        self._principal = principal

    def _own(self, card: Card | None) -> Card | None:
        mine = card is not None and (card.requester_subject, card.requester_org) == (
            self._principal.subject,
            self._principal.org,
        )
        return card if mine else None

    async def status(self, card_id: str) -> Mapping[str, Any] | None:
        card = self._own(await self._ledger.get(card_id))
        return card_for_agent(card) if card is not None else None

    async def mine(self, limit: int) -> list[Mapping[str, Any]]:
        own = (self._principal.org, self._principal.subject)
        cards = [card for card in await self._ledger.recent(limit=limit, requester=own) if self._own(card) is not None]
        return [card_for_agent(card) for card in cards[:limit]]

    async def cancel(self, card_id: str) -> Mapping[str, Any] | None:
        card = self._own(await self._ledger.get(card_id))
        if card is None:
            return None
        result = await self._ledger.cancel(card_id, actor=self._principal.subject)
        view = card_for_agent(result.card or card)
        view["cancelled"] = result.ok
        return view


def _requester(card: Card) -> Principal:
    return Principal(
        subject=card.requester_subject, org=card.requester_org, roles=card.requester_roles, key_id=card.requester_key_id
    )


def _args_hash(tool: str, version: str, canonical: Mapping[str, Any]) -> str:
    """SHA-256 over tool, tool version and the canonical (sorted-key) arguments."""
    return hashlib.sha256(f"{tool}\n{version}\n{canonical_json(canonical)}".encode()).hexdigest()


def _failure(error: UpstreamError) -> Decision:
    return Decision.deny(Code(error.code), f"{type(error).__name__}: {error}")


def _details(error: UpstreamError) -> Mapping[str, Any] | None:
    return {"reason": error.reason} if isinstance(error, UpstreamRefusedError) and error.reason else None


def _error_summary(error: ValidationError) -> list[dict[str, Any]]:
    """Field-level problems without echoing the input back (it may be long or hostile)."""
    return [
        {"field": ".".join(str(part) for part in item["loc"]), "type": item["type"], "message": item["msg"]}
        for item in error.errors(include_url=False, include_input=False)
    ]
