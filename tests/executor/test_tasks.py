"""`TaskPath` against the real Redis ledger: whatever text a caller offers as a task id, only its own
cards are tasks; anything else is NOT_FOUND, changes nothing, and is audited in printable form."""

from __future__ import annotations

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from gateway.audit.events import ListAuditSink
from gateway.codes import Code
from gateway.executor.tasks import TaskPath
from gateway.limits.budgets import Limits
from gateway.limits.rate_limiter import InMemoryRateLimiter
from gateway.principal import Principal
from gateway.printable import is_printable
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.examples import examples

ALICE = Principal(subject="alice@acme.example", org="acme", roles=frozenset({"staff"}))

_IDS = st.one_of(
    st.text(max_size=300),
    st.from_regex(r"\Acrd_[0-9]{1,2}_[0-9a-f]{32}\Z"),  # well formed, and no card of the caller's
    st.sampled_from(["", "crd_1_", "../crd_1_x", "crd_1_" + "0" * 32 + "\n", "*", "cs:{cs1}:card"]),
)


async def _probe(redis_url: str, task_id: str) -> None:
    async with Redis.from_url(redis_url) as redis:
        audit = ListAuditSink()
        tasks = TaskPath(ledger=RedisLedger(redis), audit=audit, limiter=InMemoryRateLimiter(), limits=Limits())
        assert await tasks.get(ALICE, task_id) is Code.NOT_FOUND
        assert await tasks.cancel(ALICE, task_id) is Code.NOT_FOUND
        assert await tasks.result(ALICE, task_id) is Code.NOT_FOUND
    assert [(e.action, e.outcome, e.code) for e in audit.events] == [
        ("task.get", "deny", "NOT_FOUND"),
        ("task.cancel", "deny", "NOT_FOUND"),
        ("task.result", "deny", "NOT_FOUND"),
    ]
    assert all(is_printable(e.extra.get("task_id", "")) for e in audit.events)


@settings(max_examples=examples(60), deadline=None)
@given(_IDS)
def test_any_task_id_that_is_not_the_callers_card_is_not_found_and_audited(redis_url: str, task_id: str) -> None:
    """A task id is untrusted text: it reaches the ledger only as a key lookup, and the audit escaped."""
    anyio.run(_probe, redis_url, task_id)


async def _delegated(redis_url: str) -> list[str]:
    agent_for_alice = Principal(subject="alice@acme.example", org="acme", roles=frozenset({"staff"}),
                                acting_client="agent-7@acme.example", actors=("agent-7@acme.example",))  # fmt: skip
    async with Redis.from_url(redis_url) as redis:
        audit = ListAuditSink()
        tasks = TaskPath(ledger=RedisLedger(redis), audit=audit, limiter=InMemoryRateLimiter(), limits=Limits())
        await tasks.get(agent_for_alice, "crd_1_" + "0" * 32)
    return [e.extra.get("acting_client", "") for e in audit.events]


def test_a_delegated_callers_task_events_name_the_acting_agent_as_its_tool_calls_do(redis_url: str) -> None:
    """The task path audits like the agent path (`with_acting_client`): the person and the agent acting for them."""
    assert anyio.run(_delegated, redis_url) == ["agent-7@acme.example"]
