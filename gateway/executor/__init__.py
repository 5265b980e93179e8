"""The executor: the only code path that runs a tool, in two halves that share one invoke step.

* `AgentPath` (``agent.py``) serves the MCP surface: access, validation, the approval gate (a
  write becomes a card, never an execution, with every field of its proposal), reads within their
  deadline, sealing; its refusals as the model and the audit each read them.
* `PolicyApprovals` (``policy_approvals.py``): the ``[approvals.policies]`` rules, asked about each new card.
* `ReadMemory` (``read_memory.py``): the answered reads a proposal's provenance is assessed against.
* `WritePath` (``writes.py``) serves the worker: claim, binding re-checks, DISPATCHED before the
  send, one send with the card's own key, classification, and reconciliation of unknown outcomes.
* `TaskPath` (``tasks.py``) serves the MCP surface's tasks: a principal's own proposals read,
  listed and cancelled as tasks, through the same own-card piece as the approvals tools.
* `Invoker` (``invoke.py``) is the step both call to run a tool's `execute`; `LedgerCallerCards`
  (``caller_cards.py``) is a principal's own cards, for the approvals tools and for tasks.
* `DeferralLog` (``deferrals.py``): which deferrals of an approved card the write path audits.

What it asks of its collaborators: a `ToolSource` (declarations), `OrgAdapters` (operator config),
an `AuditSink`, one `UpstreamClient` per adapter and an `IdentitySigner` (both handed to adapters
through `ToolContext`), what signs a send's approval receipts (`Receipts`), a `Ledger` and its
`DurabilityGuard` (writes only while the ledger is durable), a `RateLimiter` and the `Limits` it
enforces per requester, the ``[approvals]`` rules (`ApprovalSettings`) and how a card they leave to
a person is announced (`Announce`), a `ReadMemory` (reads remembered, and audited, for card
provenance), and the live principal of a key id (a requester's key is re-checked before its write
runs). Every one is a required constructor argument: nothing is optional and checked at run time.

What it deliberately does not know: transports (no MCP, no Starlette), bearer tokens (a
`Principal` has none), the store behind the `Ledger` Protocol, and any particular tool (no
per-tool branches).

May import: the vocabulary (`gateway.tools`, `gateway.cards`, `gateway.audit`, `gateway.config`,
`gateway.limits`, the modules at the top), `gateway.telemetry` and `policies`; never a surface, the
store's Redis code or an adapter. Who calls it: the MCP surface (the agent's path and tasks) and the
worker (the write path).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway.audit.events import AuditSink
from gateway.cards.contract import DurabilityGuard, Ledger
from gateway.config.approvals import ApprovalSettings
from gateway.config.org_adapters import OrgAdapters
from gateway.executor.agent import AgentPath, HeldRefusal
from gateway.executor.invoke import IdentitySigner, Invoker
from gateway.executor.policy_approvals import Announce, PolicyApprovals
from gateway.executor.read_memory import ReadMemory
from gateway.executor.tasks import TaskPath, Throttled
from gateway.executor.writes import LivePrincipal, Receipts, SubjectRevoked, WritePath
from gateway.limits.budgets import Limits
from gateway.limits.rate_limiter import RateLimiter
from gateway.tools.toolbox import ToolSource
from gateway.tools.upstream import UpstreamClient
from policies.engine import PolicyEngine

__all__ = [
    "AgentPath",
    "Executor",
    "HeldRefusal",
    "Invoker",
    "PolicyApprovals",
    "ReadMemory",
    "TaskPath",
    "Throttled",
    "WritePath",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Executor:
    """Both paths of one gateway, wired to the same collaborators."""

    agent: AgentPath
    writes: WritePath
    tasks: TaskPath

    @classmethod
    def build(
        cls,
        *,
        tools: ToolSource,
        org_adapters: OrgAdapters,
        policy: PolicyEngine | None,
        audit: AuditSink,
        clients: Mapping[str, UpstreamClient],
        identity: IdentitySigner,
        ledger: Ledger,
        guard: DurabilityGuard,
        live_principal: LivePrincipal,
        subject_revoked: SubjectRevoked,
        healthy: Callable[[str], bool],
        limiter: RateLimiter,
        limits: Limits,
        memory: ReadMemory,
        lease_ms: int,
        reconcile_horizon_ms: int,
        approvals: ApprovalSettings,
        announce: Announce,
        receipts: Receipts,
    ) -> Executor:
        invoker = Invoker(clients=clients, identity=identity, ledger=ledger)
        agent = AgentPath(
            tools=tools,
            org_adapters=org_adapters,
            policy=policy,
            audit=audit,
            invoker=invoker,
            ledger=ledger,
            guard=guard,
            healthy=healthy,
            limiter=limiter,
            limits=limits,
            memory=memory,
            policies=PolicyApprovals(ledger=ledger, audit=audit, settings=approvals, announce=announce),
        )
        writes = WritePath(
            tools=tools,
            org_adapters=org_adapters,
            policy=policy,
            audit=audit,
            invoker=invoker,
            ledger=ledger,
            guard=guard,
            live_principal=live_principal,
            subject_revoked=subject_revoked,
            healthy=healthy,
            lease_ms=lease_ms,
            reconcile_horizon_ms=reconcile_horizon_ms,
            receipts=receipts,
        )
        return cls(
            agent=agent, writes=writes, tasks=TaskPath(ledger=ledger, audit=audit, limiter=limiter, limits=limits)
        )
