"""The agent path's rate-budget step, in process: where it stands in the order, what it audits, how it fails."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from gateway.limits.budgets import Budget, Limits
from gateway.principal import Principal
from gateway.store.client import connect
from gateway.store.rate_buckets import RedisRateLimiter
from gateway.tools.context import ToolContext
from gateway.tools.declarations import Access
from tests.support.executors import agent_path
from tests.support.tools import EchoArgs, read_tool

pytestmark = pytest.mark.anyio

ALICE = Principal(subject="alice@acme.example", org="acme", roles=frozenset({"staff"}), key_id="key_alice")
ONE_A_MINUTE = Limits(reads=Budget(per_minute=1, burst=1))


class Counted:
    """A tool body that counts its runs."""

    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self, args: BaseModel, ctx: ToolContext) -> dict[str, Any]:
        self.runs += 1
        return {"echoed": args.text if isinstance(args, EchoArgs) else ""}


async def test_a_spent_budget_refuses_without_running_the_tool_and_audits_the_refusal() -> None:
    """The second call within the minute is RATE_LIMITED with its wait; the tool ran once; the audit
    holds the refusal with its code and the budget that refused."""
    body = Counted()
    executor, audit = agent_path(read_tool(execute=body), clients={}, limits=ONE_A_MINUTE)
    first = await executor.execute(ALICE, "demo_echo", {"text": "a"})
    second = await executor.execute(ALICE, "demo_echo", {"text": "a"})
    assert not first.is_error
    error = second.for_model()["error"]
    assert (error["code"], error["retryable"]) == ("RATE_LIMITED", True)
    assert 59 < error["details"]["retry_after"] <= 60
    assert body.runs == 1
    refusal = audit.events[-1]
    assert (refusal.code, refusal.outcome, refusal.tool) == ("RATE_LIMITED", "deny", "demo_echo")
    assert refusal.reason.startswith("reads budget spent")


async def test_unknown_and_forbidden_tools_read_as_permission_denied_and_cost_no_budget() -> None:
    """Access comes first: however often an agent calls a name it may not use, the answer is
    PERMISSION_DENIED, never RATE_LIMITED, and its budget is left for the tools it may call."""
    locked = read_tool("demo_locked", access=Access.roles("admin"))
    executor, _audit = agent_path(read_tool(), locked, clients={}, limits=ONE_A_MINUTE)
    for name in ["demo_nothing", "demo_locked"] * 10:
        assert (await executor.execute(ALICE, name, {"text": "a"})).code == "PERMISSION_DENIED"
    assert not (await executor.execute(ALICE, "demo_echo", {"text": "a"})).is_error


async def test_invalid_arguments_spend_the_budget_too() -> None:
    """A malformed call passed access, so it spends: an agent looping on bad arguments is limited."""
    executor, _audit = agent_path(read_tool(), clients={}, limits=ONE_A_MINUTE)
    assert (await executor.execute(ALICE, "demo_echo", {"nope": 1})).code == "VALIDATION_ERROR"
    assert (await executor.execute(ALICE, "demo_echo", {"text": "a"})).code == "RATE_LIMITED"


async def test_a_limiter_whose_redis_cannot_answer_fails_the_call_closed() -> None:
    """No budget can be checked: the call is refused LEDGER_UNAVAILABLE (retryable) and audited, and
    the tool does not run."""
    body = Counted()
    nowhere = connect("redis://127.0.0.1:9/0")
    try:
        limiter = RedisRateLimiter(nowhere.client)
        executor, audit = agent_path(read_tool(execute=body), clients={}, limiter=limiter)
        answer = await executor.execute(ALICE, "demo_echo", {"text": "a"})
    finally:
        await nowhere.aclose()
    assert answer.for_model()["error"]["code"] == "LEDGER_UNAVAILABLE"
    assert answer.for_model()["error"]["retryable"] is True
    assert body.runs == 0
    assert audit.events[-1].code == "LEDGER_UNAVAILABLE"
    assert audit.events[-1].reason.startswith("rate limiter error")
