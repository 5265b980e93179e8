"""An agent's path over exactly the given tools, with in-memory audit and real backend clients."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from redis.asyncio import Redis

from gateway.audit.events import ListAuditSink
from gateway.cards.contract import Transition
from gateway.config.approvals import ApprovalSettings
from gateway.config.org_adapters import OrgAdapters
from gateway.executor import AgentPath, Invoker, PolicyApprovals, ReadMemory
from gateway.executor.read_memory import AuditAfter
from gateway.limits.budgets import Limits
from gateway.limits.rate_limiter import InMemoryRateLimiter, RateLimiter
from gateway.provenance import CallHistory, HistoryRules, InMemoryCallHistory
from gateway.signing.identity import IdentityHeaders
from gateway.store.client import connect
from gateway.store.durability import LedgerGuard
from gateway.store.ledger.redis_ledger import RedisLedger
from gateway.tools.declarations import Tool
from gateway.tools.toolbox import Toolbox
from gateway.tools.upstream import UpstreamClient
from policies.engine import PolicyEngine
from tests.support.services import TEST_SIGNING_KEY

LEASE_SECONDS = 30.0
"""The default worker lease (`Settings.lease_seconds`): every test tool's timeout fits within it."""

_TOOLBOXES: dict[tuple[int, ...], Toolbox] = {}


def toolbox(tools: Sequence[Tool]) -> Toolbox:
    """The `Toolbox` of exactly `tools` (these very objects, in this order) under `LEASE_SECONDS`, built once per
    test process: deriving every tool's input and output schema takes tens of milliseconds, which a property test
    building an agent path per example would otherwise pay per example. A `Toolbox` and its tools are frozen,
    so sharing one cannot carry anything from one test to the next; the box keeps its tools alive, so no id in a
    key is taken by another object. Raises what `Toolbox` raises, every time."""
    key = tuple(map(id, tools))
    box = _TOOLBOXES.get(key)
    if box is None:
        box = _TOOLBOXES[key] = Toolbox(tools, lease_seconds=LEASE_SECONDS)
    return box


def agent_path(
    *tools: Tool,
    clients: Mapping[str, UpstreamClient],
    org: str = "acme",
    limits: Limits | None = None,
    limiter: RateLimiter | None = None,
    history: CallHistory | None = None,
    history_rules: HistoryRules | None = None,
    ledger_client: Redis | None = None,
    approvals: ApprovalSettings | None = None,
    wall_clock: Callable[[], float] = time.time,
    policy: PolicyEngine | None = None,
) -> tuple[AgentPath, ListAuditSink]:
    """Reads run against `clients`, signed for with `TEST_SIGNING_KEY`; the ledger is unreachable (and so not
    durable): no card can be made, unless a `ledger_client` is given (the ledger is then on it). Rate budgets
    (`limits`, the defaults unless given) are kept in process unless a `limiter` is given. Reads are
    remembered for provenance (under `history_rules`, the defaults unless given) in process unless a `history`
    is given, and audited after they are remembered (`AuditAfter`), stamped by `wall_clock`. Policy approval
    rules are `approvals`' (none unless given). `policy`: an operator's policy set decides access and approvals
    in place of the built-in rules."""
    audit = ListAuditSink()
    reads = history if history is not None else InMemoryCallHistory()
    nowhere = ledger_client if ledger_client is not None else connect("redis://127.0.0.1:9/0").client
    ledger = RedisLedger(nowhere)
    executor = AgentPath(
        tools=toolbox(tools),
        org_adapters=OrgAdapters({org: frozenset(tool.adapter for tool in tools)}),
        policy=policy,
        audit=audit,
        invoker=Invoker(
            clients=clients, identity=IdentityHeaders(dict.fromkeys(clients, TEST_SIGNING_KEY)), ledger=ledger
        ),
        ledger=ledger,
        guard=LedgerGuard(nowhere),
        healthy=lambda adapter: True,
        limiter=limiter if limiter is not None else InMemoryRateLimiter(),
        limits=limits if limits is not None else Limits(),
        policies=PolicyApprovals(
            ledger=ledger, audit=audit, settings=approvals or ApprovalSettings(), announce=_unheard
        ),
        memory=ReadMemory(
            reads, history_rules or HistoryRules(), audited=AuditAfter(reads, audit), wall_clock=wall_clock
        ),
    )
    return executor, audit


async def _unheard(result: Transition) -> Transition:
    """No one to tell: a card left to a person is not announced through here."""
    return result
