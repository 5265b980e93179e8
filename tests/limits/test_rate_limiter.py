"""The rate limiter's contract, against the real Redis script and the in-process implementation.

GCRA semantics are checked with a clock the test controls (both implementations take one); the
server's own clock is checked separately, by two limiters (two processes' worth) sharing one budget.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from gateway.errors import StoreUnavailableError
from gateway.limits.budgets import Budget
from gateway.limits.rate_limiter import AddressBudgets, Charge, InMemoryRateLimiter, RateLimiter, interval_us
from gateway.store.client import connect
from gateway.store.rate_buckets import LEASE_US, MAX_LEASE, RedisRateLimiter, bucket_key
from tests.support.examples import examples

pytestmark = pytest.mark.anyio


@pytest.fixture
def redis(own_redis: Redis) -> Redis:
    """A server of this module's own (conftest's `own_redis`): the round-trip counts (`_script_calls`) read
    its command statistics."""
    return own_redis


PER_SECOND_BURST_3 = Budget(per_minute=60, burst=3)
"""One call a second sustained, three at once."""
SECOND = 1_000_000
START = 1_764_000_000 * SECOND
"""A server-clock-like start (microseconds since the epoch), so the Lua arithmetic sees real magnitudes."""


class Clock:
    """Microseconds, moved by the test."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> int:
        return self.now


@pytest.fixture(params=["redis", "memory"])
async def limiter_and_clock(request: pytest.FixtureRequest, redis: Redis) -> AsyncIterator[tuple[RateLimiter, Clock]]:
    clock = Clock()
    if request.param == "redis":
        yield RedisRateLimiter(redis, clock=clock), clock
    else:
        yield InMemoryRateLimiter(clock=clock), clock


def reads(budget: Budget = PER_SECOND_BURST_3) -> list[Charge]:
    return [Charge(bucket="reads", budget=budget)]


async def test_a_full_budget_allows_its_burst_at_once_then_one_call_per_interval(
    limiter_and_clock: tuple[RateLimiter, Clock],
) -> None:
    """Burst 3 at 1/s: three calls pass at once, the fourth waits exactly a second, and after each
    further second exactly one more passes."""
    limiter, clock = limiter_and_clock
    assert [(await limiter.spend("a", reads())).allowed for _ in range(3)] == [True, True, True]
    refused = await limiter.spend("a", reads())
    assert (refused.allowed, refused.retry_after, refused.bucket) == (False, 1.0, "reads")
    clock.now += SECOND // 4
    assert (await limiter.spend("a", reads())).retry_after == 0.75
    for _ in range(3):
        clock.now += 3 * SECOND // 4
        assert (await limiter.spend("a", reads())).allowed
        assert not (await limiter.spend("a", reads())).allowed
        clock.now += SECOND // 4
        assert (await limiter.spend("a", reads())).retry_after == 0.75


async def test_an_idle_budget_refills_to_its_burst_and_no_further(limiter_and_clock: tuple[RateLimiter, Clock]) -> None:
    """Unused time refills the budget up to the burst, never beyond it."""
    limiter, clock = limiter_and_clock
    for _ in range(3):
        await limiter.spend("a", reads())
    clock.now += 3600 * SECOND
    assert [(await limiter.spend("a", reads())).allowed for _ in range(4)] == [True, True, True, False]


async def test_owners_and_buckets_have_budgets_of_their_own(limiter_and_clock: tuple[RateLimiter, Clock]) -> None:
    """Spending one owner's reads leaves another owner's, and the same owner's proposals, untouched."""
    limiter, _ = limiter_and_clock
    for _ in range(3):
        await limiter.spend("a", reads())
    assert not (await limiter.spend("a", reads())).allowed
    assert (await limiter.spend("b", reads())).allowed
    assert (await limiter.spend("a", [Charge(bucket="proposals", budget=PER_SECOND_BURST_3)])).allowed


async def test_a_refusal_by_one_budget_spends_from_none(limiter_and_clock: tuple[RateLimiter, Clock]) -> None:
    """Two budgets in one check: once the tool's own is spent, calls are refused by it (with its wait)
    and the class budget is not charged for them."""
    limiter, _ = limiter_and_clock
    tool = Charge(bucket="tool:demo_echo", budget=Budget(per_minute=6, burst=1))
    both = [*reads(), tool]
    assert (await limiter.spend("a", both)).allowed
    refused = await limiter.spend("a", both)
    assert (refused.allowed, refused.bucket, refused.retry_after) == (False, "tool:demo_echo", 10.0)
    for _ in range(5):
        assert not (await limiter.spend("a", both)).allowed
    assert [(await limiter.spend("a", reads())).allowed for _ in range(3)] == [True, True, False]


async def test_the_longest_wait_is_the_one_reported(limiter_and_clock: tuple[RateLimiter, Clock]) -> None:
    """When both budgets refuse, the call may pass only once both allow it: the longer wait is reported."""
    limiter, _ = limiter_and_clock
    slow = Charge(bucket="tool:slow", budget=Budget(per_minute=1, burst=1))
    fast = Charge(bucket="reads", budget=Budget(per_minute=60, burst=1))
    assert (await limiter.spend("a", [fast, slow])).allowed
    refused = await limiter.spend("a", [fast, slow])
    assert (refused.bucket, refused.retry_after) == ("tool:slow", 60.0)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.integers(min_value=0, max_value=3 * SECOND), min_size=1, max_size=40),
    per_minute=st.sampled_from([7.0, 60.0, 1200.0, 600.5]),
    burst=st.integers(min_value=1, max_value=5),
)
async def test_the_redis_script_answers_exactly_as_the_reference_steps(
    redis: Redis, steps: list[int], per_minute: float, burst: int
) -> None:
    """For any schedule of calls, the Lua script and the Python GCRA give the same verdicts and waits,
    and no window of time ever lets through more than the burst plus what the rate earned in it."""
    budget = Budget(per_minute=per_minute, burst=burst)
    owner = f"owner-{per_minute}-{burst}-{len(steps)}-{sum(steps)}"
    await redis.delete(bucket_key(owner, "reads"))
    clock = Clock()
    script, reference = RedisRateLimiter(redis, clock=clock), InMemoryRateLimiter(clock=clock)
    allowed_at: list[int] = []
    for step in steps:
        clock.now += step
        answer = await script.spend(owner, reads(budget))
        assert answer == await reference.spend(owner, reads(budget))
        if answer.allowed:
            allowed_at.append(clock.now)
    interval = interval_us(budget)
    for i, first in enumerate(allowed_at):
        for j in range(i, len(allowed_at)):
            assert j - i + 1 <= burst + (allowed_at[j] - first) // interval


async def test_a_budget_key_expires_when_the_budget_is_full_again(redis: Redis) -> None:
    """The key lives exactly as long as the budget is not full, so idle owners leave nothing behind."""
    limiter = RedisRateLimiter(redis, clock=Clock())
    await limiter.spend("a", reads())
    await limiter.spend("a", reads())
    assert 1_000 < await redis.pttl(bucket_key("a", "reads")) <= 2_000  # the clock is ours, the TTL the server's


async def test_two_limiters_on_the_server_clock_share_one_budget(redis: Redis) -> None:
    """Two processes' limiters, timed by the server's TIME, spend from one budget: together they get
    the burst, not twice it."""
    one, two = RedisRateLimiter(redis), RedisRateLimiter(redis)
    slow = reads(Budget(per_minute=1, burst=4))
    verdicts = [await (one if i % 2 else two).spend("shared", slow) for i in range(8)]
    assert [v.allowed for v in verdicts] == [True] * 4 + [False] * 4
    assert all(55 < v.retry_after <= 60 for v in verdicts[4:])


async def test_a_limiter_whose_redis_cannot_answer_raises_store_unavailable() -> None:
    """Redis faults reach the caller as `StoreUnavailableError`, on which the executor fails closed."""
    connection = connect("redis://127.0.0.1:9/0")
    try:
        with pytest.raises(StoreUnavailableError):
            await RedisRateLimiter(connection.client).spend("a", reads())
    finally:
        await connection.aclose()


# -- the auth edge's budgets per address --------------------------------------------------------------


def _budgets(capacity: int = 10) -> tuple[AddressBudgets, Callable[[int], None]]:
    clock = Clock()

    def advance(us: int) -> None:
        clock.now += us

    return AddressBudgets(PER_SECOND_BURST_3, capacity=capacity, clock=clock), advance


def test_an_address_is_blocked_once_its_burst_of_failures_is_spent_and_only_then() -> None:
    """Three failures pass; the address is then blocked for a second, and the first block is flagged
    once (to be audited once), until it passes again."""
    budgets, advance = _budgets()
    for _ in range(3):
        assert budgets.blocked("10.0.0.1") == (0.0, False)
        assert budgets.spend("10.0.0.1")
    assert budgets.blocked("10.0.0.1") == (1.0, True)
    assert budgets.blocked("10.0.0.1") == (1.0, False)
    assert budgets.blocked("10.0.0.2") == (0.0, False)
    advance(SECOND)
    assert budgets.blocked("10.0.0.1") == (0.0, False)
    assert budgets.spend("10.0.0.1")
    assert budgets.blocked("10.0.0.1") == (1.0, True)


def test_the_table_of_addresses_is_bounded() -> None:
    """However many addresses fail, at most `capacity` are remembered; the least recent go first."""
    budgets, _ = _budgets(capacity=10)
    for n in range(1000):
        budgets.spend(f"10.0.{n // 256}.{n % 256}")
    assert len(budgets) == 10
    for _ in range(2):
        budgets.spend("10.0.3.231")
    assert budgets.blocked("10.0.3.231")[0] > 0


async def test_concurrent_checks_go_together_and_each_is_its_own_atomic_step(redis: Redis) -> None:
    """Fifty checks at once (pipelined while one round trip is in flight) allow exactly the burst."""
    limiter = RedisRateLimiter(redis, clock=Clock())
    verdicts = await asyncio.gather(*(limiter.spend("a", reads(Budget(per_minute=1, burst=10))) for _ in range(50)))
    assert sum(v.allowed for v in verdicts) == 10


async def test_a_server_that_lost_the_script_gets_it_again_alone_or_in_a_batch(redis: Redis) -> None:
    """After SCRIPT FLUSH (a restart, a failover, an eviction of scripts) the next checks load it again."""
    limiter = RedisRateLimiter(redis, clock=Clock())
    await redis.script_flush()
    assert (await limiter.spend("a", reads())).allowed
    await redis.script_flush()
    verdicts = await asyncio.gather(*(limiter.spend("b", reads()) for _ in range(5)))
    assert [v.allowed for v in verdicts] == [True, True, True, False, False]


async def test_checks_waiting_behind_a_failed_round_trip_all_fail_closed() -> None:
    """Every check queued on a Redis that cannot answer raises `StoreUnavailableError`; none hangs."""
    connection = connect("redis://127.0.0.1:9/0")
    try:
        limiter = RedisRateLimiter(connection.client)
        answers = await asyncio.gather(*(limiter.spend("a", reads()) for _ in range(5)), return_exceptions=True)
    finally:
        await connection.aclose()
    assert all(isinstance(answer, StoreUnavailableError) for answer in answers)


async def _script_calls(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def test_a_refusal_is_repeated_from_memory_for_as_long_as_it_certainly_holds(redis: Redis) -> None:
    """Once refused with a wait, the same check is refused without a round trip until the wait is over,
    with the wait counting down; then it asks Redis again."""
    clock = Clock()
    limiter = RedisRateLimiter(redis, clock=clock)
    for _ in range(3):
        await limiter.spend("a", reads())
    assert (await limiter.spend("a", reads())).retry_after == 1.0
    before = await _script_calls(redis)
    clock.now += SECOND // 2
    repeated = [await limiter.spend("a", reads()) for _ in range(100)]
    assert {(v.allowed, v.retry_after, v.bucket) for v in repeated} == {(False, 0.5, "reads")}
    assert await _script_calls(redis) == before
    assert (await limiter.spend("b", reads())).allowed  # another owner is not held
    clock.now += SECOND // 2
    assert (await limiter.spend("a", reads())).allowed
    assert await _script_calls(redis) == before + 2


# -- refusals held in memory, and leases --------------------------------------------------------------


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    schedule=st.lists(
        st.tuples(st.integers(min_value=0, max_value=SECOND // 2), st.sampled_from(["one", "two"])),
        min_size=1,
        max_size=60,
    ),
    per_minute=st.sampled_from([60.0, 600.0, 1200.0]),
    burst=st.sampled_from([1, 3, 16, 40]),
)
async def test_a_held_refusal_is_one_redis_would_also_answer_for_any_schedule_of_two_processes(
    redis: Redis, schedule: list[tuple[int, str]], per_minute: float, burst: int
) -> None:
    """GCRA's refusal is monotone until its retry time: whenever either process's memory holds a refusal,
    a check with no memory at all (asking Redis) is refused too, with at least the wait held; once a
    process met a refusal, its own spends are refused until the refusal ends; and a spend the other
    process is allowed meanwhile is one it had leased before (served from memory, no round trip: Redis
    had counted it already). Leased budgets included."""
    budget = Budget(per_minute=per_minute, burst=burst)
    owner = f"held-{per_minute}-{burst}-{len(schedule)}-{sum(s for s, _ in schedule)}"
    await redis.delete(bucket_key(owner, "reads"))
    clock = Clock()
    limiters = {"one": RedisRateLimiter(redis, clock=clock), "two": RedisRateLimiter(redis, clock=clock)}
    refused_until = {"one": 0, "two": 0}
    for step, who in schedule:
        clock.now += step
        for limiter in limiters.values():
            held = limiter.held(owner, reads(budget))
            if held is not None:
                asked = await RedisRateLimiter(redis, clock=clock).spend(owner, reads(budget))
                assert not asked.allowed and asked.retry_after >= held.retry_after
        round_trips = await _script_calls(redis)
        verdict = await limiters[who].spend(owner, reads(budget))
        assert not (verdict.allowed and clock.now < refused_until[who])
        other = "two" if who == "one" else "one"
        if verdict.allowed and clock.now < refused_until[other]:
            assert await _script_calls(redis) == round_trips  # a leased call, counted before the refusal
        if not verdict.allowed:
            refused_until[who] = max(refused_until[who], clock.now + int(verdict.retry_after * SECOND) - 1000)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    schedule=st.lists(
        st.tuples(st.integers(min_value=0, max_value=20_000), st.sampled_from(["one", "two"])),
        min_size=1,
        max_size=200,
    ),
    burst=st.sampled_from([16, 40, 100]),
)
async def test_leased_calls_never_overspend_a_budget_shared_by_two_processes(
    redis: Redis, schedule: list[tuple[int, str]], burst: int
) -> None:
    """Two processes leasing from one budget (20 calls a second) serve, in any window of time, at most
    the burst plus what the rate earned in the window and in one lease time before it."""
    budget = Budget(per_minute=1200, burst=burst)
    owner = f"lease-{burst}-{len(schedule)}-{sum(s for s, _ in schedule)}"
    await redis.delete(bucket_key(owner, "reads"))
    clock = Clock()
    limiters = {"one": RedisRateLimiter(redis, clock=clock), "two": RedisRateLimiter(redis, clock=clock)}
    served: list[int] = []
    for step, who in schedule:
        clock.now += step
        if (await limiters[who].spend(owner, reads(budget))).allowed:
            served.append(clock.now)
    interval = interval_us(budget)
    for i, first in enumerate(served):
        for j in range(i, len(served)):
            assert j - i + 1 <= burst + (served[j] - first + LEASE_US) // interval


async def test_a_caller_that_keeps_calling_spends_ahead_and_asks_redis_for_a_fraction_of_its_calls(
    redis: Redis,
) -> None:
    """1,000 checks of a budget with room to spare cost well under a round trip each (the lease doubles up
    to its cap), and every one of them was spent in Redis: the budget's TAT moved by 1,000 intervals at least."""
    clock = Clock()
    limiter = RedisRateLimiter(redis, clock=clock)
    # An interval of 100 ms: 1,000 calls move the TAT 100 s ahead, so the bucket's key (which expires once
    # the budget would be full again, by the server's clock) outlives the test however slow the machine.
    budget = Budget(per_minute=600, burst=10**6)
    before = await _script_calls(redis)
    assert all([(await limiter.spend("busy", reads(budget))).allowed for _ in range(1000)])
    round_trips = await _script_calls(redis) - before
    assert 1000 // MAX_LEASE <= round_trips <= 1000 // MAX_LEASE + 10
    tat = int(await redis.get(bucket_key("busy", "reads")) or 0)
    assert tat - START >= 1000 * interval_us(budget)


async def test_a_lease_is_forfeit_after_its_time_and_the_next_one_is_smaller(redis: Redis) -> None:
    """Calls leased and not served within `LEASE_US` are not served later: the next call asks Redis again."""
    clock = Clock()
    limiter = RedisRateLimiter(redis, clock=clock)
    budget = Budget(per_minute=60_000, burst=1_000)
    for _ in range(7):  # leases of 1, 2, 4: all used up in time
        assert (await limiter.spend("slow", reads(budget))).allowed
    before = await _script_calls(redis)
    assert (await limiter.spend("slow", reads(budget))).allowed  # a lease of 8: one served, seven left
    clock.now += LEASE_US
    assert (await limiter.spend("slow", reads(budget))).allowed
    assert await _script_calls(redis) == before + 2


async def test_budgets_with_a_small_burst_are_spent_one_call_at_a_time(redis: Redis) -> None:
    """Under 16 calls of burst nothing is leased: each check is its own round trip, as exact as GCRA."""
    limiter = RedisRateLimiter(redis, clock=Clock())
    before = await _script_calls(redis)
    for _ in range(10):
        await limiter.spend("small", reads(Budget(per_minute=600, burst=15)))
    assert await _script_calls(redis) == before + 10


async def test_the_call_that_spends_the_last_of_a_budget_holds_the_refusal_of_the_next(redis: Redis) -> None:
    """The reply that allows the burst's last call says how long the next one waits: it is refused from
    memory at once, with that wait, and no round trip."""
    clock = Clock()
    limiter = RedisRateLimiter(redis, clock=clock)
    assert [(await limiter.spend("last", reads())).allowed for _ in range(3)] == [True, True, True]
    held = limiter.held("last", reads())
    assert held is not None and (held.allowed, held.retry_after, held.bucket) == (False, 1.0, "reads")
    before = await _script_calls(redis)
    assert (await limiter.spend("last", reads())).retry_after == 1.0
    assert await _script_calls(redis) == before
