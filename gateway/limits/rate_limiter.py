"""Rate budgets as the executor and the auth edge see them: the `RateLimiter` contract and GCRA.

`RateLimiter` is the seam between the executor's agent path, which decides which budgets a call
spends (`policies.charges`), and the store that keeps them (`gateway.store.rate_buckets`: one atomic
Lua script per check on the Redis every gateway process shares, timed by the server's clock).
`InMemoryRateLimiter` is the same contract for one process.

The algorithm is GCRA (the generic cell rate algorithm): each budget keeps one number, its
theoretical arrival time (TAT). A call at `now` moves it to ``max(TAT, now) + interval`` and is
allowed while that is at most ``burst * interval`` ahead of `now`; so `burst` calls pass at once, and
then one per `interval`. A refused call changes nothing and learns how long until one would pass. A
budget nobody spends from for ``burst * interval`` is full again, so its state can simply expire.
All arithmetic is in integer microseconds, exact in Python and in Redis' Lua alike.

A refusal is monotone until its retry time: a budget refills only with time, and every spend
anyone makes only moves its TAT further out, so a check refused at `t` with a wait `W` is refused
by every check of the same budgets made before ``t + W``, in any process (`held` relies on it;
tests/limits/test_rate_limiter.py proves it for any schedule).

`AddressBudgets` is GCRA for the auth edge: in process, for a bounded number of client addresses.

Methods of a `RateLimiter` raise `gateway.errors.StoreUnavailableError` when the store cannot
answer; callers fail closed on it.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.limits.budgets import Budget

__all__ = [
    "AddressBudgets",
    "Charge",
    "InMemoryRateLimiter",
    "RateLimiter",
    "RateVerdict",
    "gcra",
    "interval_us",
    "monotonic_us",
    "retry_after_seconds",
]


def monotonic_us() -> int:
    """This process's clock for in-process budgets, in microseconds."""
    return time.monotonic_ns() // 1000


def interval_us(budget: Budget) -> int:
    """Microseconds between two calls at `budget`'s sustained rate (at least 1)."""
    return max(1, round(60_000_000 / budget.per_minute))


@dataclass(frozen=True, kw_only=True, slots=True)
class Charge:
    """One budget a call spends from: its name within the owner's budgets, and its rate."""

    bucket: str
    """``reads``, ``proposals`` or ``tool:<name>``; a plain word, part of a store key."""
    budget: Budget


@dataclass(frozen=True, kw_only=True, slots=True)
class RateVerdict:
    """The answer of one spend: allowed, or refused with the time until the call would pass."""

    allowed: bool
    retry_after: float = 0.0
    """Seconds until the same call would be allowed (rounded up to the millisecond); 0 when allowed."""
    bucket: str = ""
    """The budget that refused (the one with the longest wait); empty when allowed."""


def gcra(tat_us: int | None, now_us: int, budget: Budget) -> tuple[int, int]:
    """One GCRA step: ``(new_tat_us, wait_us)``. `wait_us` is 0 when the call is allowed, and then
    `new_tat_us` is the budget's new state; otherwise the state must stay `tat_us`."""
    interval = interval_us(budget)
    new_tat = max(tat_us if tat_us is not None else now_us, now_us) + interval
    over = new_tat - now_us - interval * budget.burst
    return new_tat, max(0, over)


def retry_after_seconds(wait_us: int) -> float:
    """A wait in microseconds as the seconds a refusal reports, rounded up to the millisecond."""
    return math.ceil(wait_us / 1000) / 1000


class RateLimiter(Protocol):
    """Budgets per owner, shared by every gateway process that uses the same store."""

    async def spend(self, owner: str, charges: Sequence[Charge]) -> RateVerdict:
        """Spend one call from each of `owner`'s budgets in `charges`, all or none, in one atomic step.

        Allowed only when every budget allows it; a refused call spends from none of them, so a
        per-tool refusal does not also cost the read budget. `owner` is any string naming whose
        budgets these are (the executor uses the requester's org and subject).

        Raises:
            StoreUnavailableError: the store cannot answer; the caller fails closed.
        """
        ...

    def held(self, owner: str, charges: Sequence[Charge]) -> RateVerdict | None:
        """The refusal `spend(owner, charges)` would certainly answer now, known without asking the
        store; None when only the store can tell. Spends nothing and does no I/O, so the MCP edge can
        answer a flood with it before parsing more of the request than the tool's name."""
        ...


class InMemoryRateLimiter:
    """`RateLimiter` for one process: the same GCRA steps over a dict, with an injectable clock.

    Buckets whose state is in the past are full and are dropped when the dict reaches `capacity`,
    so memory stays bounded by the owners spending at once.
    """

    def __init__(self, *, clock: Callable[[], int] = monotonic_us, capacity: int = 100_000) -> None:
        self._clock = clock
        self._capacity = capacity
        self._tats: dict[tuple[str, str], int] = {}

    def _steps(self, owner: str, charges: Sequence[Charge], now: int) -> list[tuple[str, int, int]]:
        return [(c.bucket, *gcra(self._tats.get((owner, c.bucket)), now, c.budget)) for c in charges]

    def held(self, owner: str, charges: Sequence[Charge]) -> RateVerdict | None:
        return _refusal(self._steps(owner, charges, self._clock()))

    async def spend(self, owner: str, charges: Sequence[Charge]) -> RateVerdict:
        now = self._clock()
        steps = self._steps(owner, charges, now)
        refused = _refusal(steps)
        if refused is not None:
            return refused
        if len(self._tats) >= self._capacity:
            self._tats = {key: tat for key, tat in self._tats.items() if tat > now}
        for bucket, new_tat, _ in steps:
            self._tats[(owner, bucket)] = new_tat
        return RateVerdict(allowed=True)


def _refusal(steps: list[tuple[str, int, int]]) -> RateVerdict | None:
    """The refusal of GCRA `steps` ``(bucket, new_tat, wait)``: by the longest wait; None when all allow."""
    worst = max(steps, key=lambda step: step[2], default=None)
    if worst is None or worst[2] <= 0:
        return None
    return RateVerdict(allowed=False, retry_after=retry_after_seconds(worst[2]), bucket=worst[0])


class AddressBudgets:
    """One GCRA budget per client address, kept in this process, for at most `capacity` addresses.

    The auth edge asks `blocked` before it looks a key up and calls `spend` for each failed
    authentication. Addresses are kept least recently spent first; a new address past `capacity`
    evicts the oldest, which costs that address at most a fresh budget. Nothing here is shared
    between processes: each one allows `budget` per address on its own.

    A blocked address does not lock out the good keys behind it (an office behind one NAT with one
    misconfigured client): the edge `vouch`es for each credential it admitted, by a digest, and a
    credential vouched for from that address within `vouch_seconds` is not blocked (`vouched`).
    A flood cannot use it: it would need a credential that authenticated from its address, and that
    credential is then looked up like any other (a revoked one is refused and `forget`-ten).
    """

    def __init__(
        self,
        budget: Budget,
        *,
        capacity: int = 10_000,
        clock: Callable[[], int] = monotonic_us,
        vouch_seconds: float = 3600.0,
    ) -> None:
        self._budget = budget
        self._capacity = capacity
        self._clock = clock
        self._interval = interval_us(budget)
        self._tats: OrderedDict[str, int] = OrderedDict()
        self._announced: set[str] = set()
        self._vouch_us = int(vouch_seconds * 1_000_000)
        self._vouched: OrderedDict[tuple[str, bytes], int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tats)

    def blocked(self, address: str) -> tuple[float, bool]:
        """``(retry_after, first)``: seconds until a spend from `address` would pass (0: it would pass
        now), and whether this is the first time it is blocked since it last passed (to audit once)."""
        tat = self._tats.get(address)
        if tat is None:
            return 0.0, False
        wait = tat - self._clock() - self._interval * (self._budget.burst - 1)
        if wait <= 0:
            self._announced.discard(address)
            return 0.0, False
        first = address not in self._announced
        self._announced.add(address)
        return retry_after_seconds(wait), first

    def vouch(self, address: str, credential: bytes) -> None:
        """`credential` (a digest, never a secret) authenticated from `address` just now."""
        entry = (address, credential)
        self._vouched[entry] = self._clock() + self._vouch_us
        self._vouched.move_to_end(entry)
        while len(self._vouched) > self._capacity:
            self._vouched.popitem(last=False)

    def vouched(self, address: str, credential: bytes) -> bool:
        """Whether `credential` authenticated from `address` within the last `vouch_seconds`."""
        until = self._vouched.get((address, credential))
        return until is not None and until > self._clock()

    def forget(self, address: str, credential: bytes) -> None:
        """`credential` failed from `address`: it is vouched for no longer."""
        self._vouched.pop((address, credential), None)

    def spend(self, address: str) -> bool:
        """Spend one from `address`'s budget; False (and nothing spent) when it is already empty."""
        new_tat, wait = gcra(self._tats.get(address), self._clock(), self._budget)
        if wait > 0:
            return False
        self._tats[address] = new_tat
        self._tats.move_to_end(address)
        while len(self._tats) > self._capacity:
            evicted, _ = self._tats.popitem(last=False)
            self._announced.discard(evicted)
        return True
