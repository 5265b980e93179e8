"""Rate budgets end to end: real gateways under uvicorn, one real Redis, the real MCP client.

Each test runs its own gateway(s) with small budgets, so a flood takes a handful of calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.limits.budgets import Budget, Limits, OrgLimits
from gateway.runtime.app import create_app
from tests.support.agents import agent, error_code, make_key, payload
from tests.support.services import Backend, gateway_settings

pytestmark = pytest.mark.anyio

AVAILABILITY = {"room_id": "room-atlas", "date": "2026-12-01"}
SLOW = Budget(per_minute=1, burst=5)
"""Five calls at once, then one a minute: nothing refills within a test."""


@contextmanager
def gateways(redis_url: str, backends: dict[str, Backend], limits: Limits, count: int = 1) -> Iterator[list[str]]:
    """`count` gateways (each its own app, Redis client and limiter) on one Redis; their MCP URLs."""
    settings = replace(gateway_settings(redis_url, backends), run_worker=False, limits=limits)
    with ExitStack() as stack:
        bases = [stack.enter_context(serve_app_in_thread(create_app(settings), lifespan=True)) for _ in range(count)]
        yield [f"{base}/mcp" for base in bases]


def retry_after(result: Any) -> float:
    assert error_code(result) == "RATE_LIMITED"
    return float(payload(result)["error"]["details"]["retry_after"])


async def test_a_flood_from_one_subject_is_refused_with_retry_after_while_another_subject_is_served(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """Alice's calls pass up to the burst and are then RATE_LIMITED with a wait; Bob's, interleaved
    with hers, all succeed. A second key of Alice's spends from the same budget as her first."""
    alice = await make_key(redis, subject="alice@acme.example")
    alice_again = await make_key(redis, subject="alice@acme.example")
    bob = await make_key(redis, subject="bob@acme.example")
    with gateways(redis_url, backends, Limits(reads=SLOW)) as [url], anyio.fail_after(30):
        async with agent(url, alice) as flooding, agent(url, bob) as steady, agent(url, alice_again) as second_key:
            answers = []
            for _ in range(8):
                answers.append(await flooding.call_tool("rooms_availability", AVAILABILITY))
                bobs = await steady.call_tool("rooms_list", {}) if len(answers) <= 5 else None
                assert bobs is None or not bobs.is_error, bobs
            assert [a.is_error for a in answers] == [False] * 5 + [True] * 3
            assert all(50 < retry_after(a) <= 60 for a in answers[5:])
            assert retry_after(await second_key.call_tool("rooms_list", {})) > 0


async def test_two_gateway_processes_on_one_redis_share_one_budget(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """Calls alternating between two gateways get the burst once between them, not once each."""
    token = await make_key(redis)
    with gateways(redis_url, backends, Limits(reads=SLOW), count=2) as urls, anyio.fail_after(30):
        async with agent(urls[0], token) as one, agent(urls[1], token) as two:
            errors = [(await (one, two)[i % 2].call_tool("rooms_list", {})).is_error for i in range(10)]
    assert errors == [False] * 5 + [True] * 5


async def test_a_tools_own_budget_is_spent_besides_the_read_budget(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """``[limits.tools.rooms_availability]`` limits that tool alone; the caller's other reads go on."""
    token = await make_key(redis)
    limits = Limits(reads=SLOW, tools={"rooms_availability": Budget(per_minute=1, burst=2)})
    with gateways(redis_url, backends, limits) as [url], anyio.fail_after(30):
        async with agent(url, token) as client:
            tool = [await client.call_tool("rooms_availability", AVAILABILITY) for _ in range(3)]
            others = [await client.call_tool("rooms_list", {}) for _ in range(3)]
    assert [r.is_error for r in tool] == [False, False, True]
    assert 50 < retry_after(tool[2]) <= 60
    assert [r.is_error for r in others] == [False, False, False]  # 2 + 3 reads: within the burst of 5


async def test_an_orgs_override_replaces_the_default_budget_for_its_principals_only(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """Globex's principals get its smaller read budget; Acme's keep the default one."""
    globex = await make_key(redis, org="globex", subject="gina@globex.example")
    acme = await make_key(redis, org="acme", subject="alice@acme.example")
    limits = Limits(reads=SLOW, orgs={"globex": OrgLimits(reads=Budget(per_minute=1, burst=2))})
    with gateways(redis_url, backends, limits) as [url], anyio.fail_after(30):
        async with agent(url, globex) as small, agent(url, acme) as default:
            globex_errors = [(await small.call_tool("rooms_list", {})).is_error for _ in range(3)]
            acme_errors = [(await default.call_tool("rooms_list", {})).is_error for _ in range(3)]
    assert globex_errors == [False, False, True]
    assert acme_errors == [False, False, False]


async def test_write_proposals_spend_the_proposal_budget_not_the_read_budget(
    redis: Redis, redis_url: str, backends: dict[str, Backend]
) -> None:
    """Proposals past their burst are RATE_LIMITED, and the caller can still read."""
    token = await make_key(redis, roles=("staff",))
    limits = Limits(reads=SLOW, proposals=Budget(per_minute=1, burst=2))
    # Slots within opening hours: one outside them is INFEASIBLE and makes no card.
    booking = {"room_id": "room-atlas", "date": "2027-02-01", "title": "sync"}
    with gateways(redis_url, backends, limits) as [url], anyio.fail_after(30):
        async with agent(url, token) as client:
            slots = [{"start": f"{h}:00", "end": f"{h}:30"} for h in (12, 13, 14)]
            cards = [await client.call_tool("rooms_book", {**booking, **slot}) for slot in slots]
            read = await client.call_tool("rooms_list", {})
    assert [c.is_error for c in cards] == [False, False, True]
    assert retry_after(cards[2]) > 0
    assert not read.is_error


async def test_a_backends_own_429_reaches_the_agent_as_rate_limited_with_its_retry_after(
    redis: Redis, redis_url: str, clean_backends: dict[str, Backend]
) -> None:
    """The rooms backend answers 429 with ``Retry-After: 7``: the agent reads RATE_LIMITED, retryable,
    with that wait; nothing of the backend's body reaches it."""
    token = await make_key(redis)
    clean_backends["rooms"].set_faults(status=429, retry_after=7, paths=["/rooms"])
    with gateways(redis_url, clean_backends, Limits()) as [url], anyio.fail_after(30):
        async with agent(url, token) as client:
            result = await client.call_tool("rooms_list", {})
    assert retry_after(result) == 7.0
    error = payload(result)["error"]
    assert error["retryable"] is True
    assert "injected_fault" not in str(payload(result))
