"""Rate budgets in Redis, shared by every gateway process: GCRA in one atomic script per check.

Who calls it: the executor's agent path, through the `gateway.limits.rate_limiter.RateLimiter` Protocol, once
per tool call that passed access. One check is at most one ``EVALSHA``, however many budgets it spends
from (the class budget and the tool's own): the script reads every budget, and writes them only
when all of them allow the call, so a refusal spends nothing.

Time is the server's (``redis.call('TIME')``), never a process's: two gateways whose clocks
disagree still share one budget. Tests may pass a clock in; the script then uses that instead.

A refusal is remembered in process for as long as it certainly holds (its wait: a budget refills
only with time, `gateway.limits.rate_limiter`), so a flood past its budget is answered without a round trip;
`held` answers from that memory alone, for the MCP edge. An allowed call that spent the last of a
budget learns, in the same reply, how long the next one will wait, and that refusal is remembered
as well: a caller kept at its sustained rate meets Redis once per call it is allowed, not twice.

Leases: an owner that keeps calling spends ahead. A round trip may spend up to `MAX_LEASE` calls
at once (never more than `LEASE_SHARE` of a budget's burst allows; budgets with a burst under 16
are spent one call at a time), and this process then serves the ones it spent without asking
Redis, for at most `LEASE_US`; what it has not served by then is forfeit. Every call served was
spent in Redis first, so the budget is never overspent and processes still share it; the price is
that a process may hold up to a lease of calls unused (another process meets the refusal that
much sooner), and a call may be served up to 100 ms after Redis counted it. The lease grows while
each is used up in time and shrinks when calls were forfeit, so a slow caller spends one at a time.

Checks that arrive while one round trip is in flight wait for it and then go together, as one
pipeline of script calls (`_Coalescer`): a lone check costs one round trip as before, and under
load the client-side cost of a round trip, most of a check's CPU, is shared. Each check is still
its own atomic script call.

Redis layout: ``countersign:rate:{<owner hash>}:<bucket>`` -> the budget's TAT in microseconds,
set with a ``PX`` of exactly the time until the budget is full again, so an idle budget leaves no
key behind. All of one owner's buckets share a hash tag, so a check touches one Cluster slot; the
owner is hashed so its text (a subject may hold any printable character) never reaches a key.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from gateway.limits.rate_limiter import Charge, RateVerdict, interval_us, monotonic_us, retry_after_seconds
from gateway.store.client import store_boundary

__all__ = ["SPEND_SCRIPT", "RedisRateLimiter", "bucket_key"]

SPEND_SCRIPT = """
-- KEYS: one budget each. ARGV[1]: now in microseconds, or '' for the server's clock; ARGV[2]: how
-- many calls to spend at most (at least one); then, per key, its interval (us) and burst.
-- Returns {1, calls spent, wait_us, index}: allowed, and how long the next call will wait (0: it
-- would pass now) and by which key; or {0, wait_us, index of the refusing key}: refused.
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local want = tonumber(ARGV[2])
local tats, intervals, bursts = {}, {}, {}
local worst, worst_at = 0, 0
for i = 1, #KEYS do
  local interval, burst = tonumber(ARGV[2 * i + 1]), tonumber(ARGV[2 * i + 2])
  local tat = tonumber(redis.call('GET', KEYS[i])) or now
  if tat < now then tat = now end
  tats[i], intervals[i], bursts[i] = tat, interval, burst
  -- How many calls fit now: n such that tat + n * interval - now <= interval * burst.
  local fit = math.floor((interval * burst - (tat - now)) / interval)
  if fit < 1 then
    local over = tat + interval - now - interval * burst
    if over > worst then worst, worst_at = over, i end
  elseif fit < want then
    want = fit
  end
end
-- Every guard before the first write: a refusal by any budget spends from none.
if worst_at > 0 then return {0, worst, worst_at} end
for i = 1, #KEYS do
  local tat = tats[i] + want * intervals[i]
  redis.call('SET', KEYS[i], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000))
  local over = tat + intervals[i] - now - intervals[i] * bursts[i]
  if over > worst then worst, worst_at = over, i end
end
return {1, want, worst, worst_at}
"""


def bucket_key(owner: str, bucket: str) -> str:
    """The Redis key of `owner`'s `bucket`."""
    tag = hashlib.sha256(owner.encode()).hexdigest()[:32]
    return f"countersign:rate:{{{tag}}}:{bucket}"


_Call = tuple[list[str], list[str | int], "asyncio.Future[Any] | None"]


class _Coalescer:
    """Runs script calls one round trip at a time: a call made while none is in flight goes at once;
    calls made while one is in flight wait for it and then go together, pipelined."""

    def __init__(self, client: aioredis.Redis, script: str) -> None:
        self._client = client
        self._script = script
        self._sha = hashlib.sha1(script.encode()).hexdigest()
        self._busy = False
        self._queue: list[_Call] = []
        self._drainer: asyncio.Task[None] | None = None

    async def call(self, keys: list[str], args: list[str | int]) -> Any:
        if self._busy:
            answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._queue.append((keys, args, answer))
            return await answer
        self._busy = True
        try:
            [reply] = await self._round_trip([(keys, args, None)])
        finally:
            if self._queue:
                self._drainer = asyncio.create_task(self._drain())
            else:
                self._busy = False
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                try:
                    replies = await self._round_trip(batch)
                except BaseException as error:  # every waiting call fails as the round trip did
                    replies = [error] * len(batch)
                for (_, _, answer), reply in zip(batch, replies, strict=True):
                    if answer is not None and not answer.done():
                        if isinstance(reply, BaseException):
                            answer.set_exception(reply)
                        else:
                            answer.set_result(reply)
        finally:
            self._busy = False

    async def _round_trip(self, batch: list[_Call]) -> list[Any]:
        for _ in range(2):  # a second time only after loading a script the server did not have
            if len(batch) == 1:
                keys, args, _ = batch[0]
                try:
                    return [await self._client.evalsha(self._sha, len(keys), *keys, *args)]
                except NoScriptError:
                    await self._client.script_load(self._script)
                    continue
            pipe = self._client.pipeline(transaction=False)
            for keys, args, _ in batch:
                # As a raw command: a Cluster pipeline refuses its evalsha() method, yet routes the
                # command itself by its keys (every owner's keys share one slot).
                pipe.execute_command("EVALSHA", self._sha, len(keys), *keys, *args)
            replies = await pipe.execute(raise_on_error=False)
            if not any(isinstance(reply, NoScriptError) for reply in replies):
                return list(replies)
            await self._client.script_load(self._script)
        raise NoScriptError("the rate-limit script could not be loaded")


LEASE_US = 100_000
"""How long a process may serve calls it spent ahead (a lease) before the rest are forfeit: 100 ms."""
MAX_LEASE = 16
"""The most calls one round trip spends ahead."""
LEASE_SHARE = 8
"""A lease takes at most 1/8 of a budget's burst, so the calls one process holds unused stay a small
part of what other processes sharing the budget can get; a budget with a burst under 16 is never leased."""


@dataclass(slots=True)
class _Lease:
    left: int
    """Calls spent in Redis and not served yet."""
    until: int
    """Local time (us) after which `left` is forfeit."""
    size: int
    """What the round trip that made it asked for."""


_ALLOWED = RateVerdict(allowed=True)


@store_boundary
class RedisRateLimiter:
    """`RateLimiter` over one Redis: every process using the same server spends from the same budgets."""

    def __init__(
        self, client: aioredis.Redis, *, clock: Callable[[], int] | None = None, remembered: int = 10_000
    ) -> None:
        self._spend = _Coalescer(client, SPEND_SCRIPT)
        self._clock = clock
        self._local_clock = clock if clock is not None else monotonic_us
        self._remembered = remembered
        # (owner, budgets) -> (local time until which the same check is certainly refused, the bucket).
        # A refusal with a wait of W holds, everywhere, for W (`gateway.limits.rate_limiter`: refusals are
        # monotone): repeating it needs no round trip, so a flood past its budget costs Redis nothing.
        self._refused: dict[_Key, tuple[int, str]] = {}
        self._leases: dict[_Key, _Lease] = {}

    def held(self, owner: str, charges: Sequence[Charge]) -> RateVerdict | None:
        return self._held((owner, _budgets(charges)), self._local_clock())

    def _held(self, key: _Key, now: int) -> RateVerdict | None:
        held = self._refused.get(key)
        if held is None or held[0] <= now:
            return None
        return RateVerdict(allowed=False, retry_after=retry_after_seconds(held[0] - now), bucket=held[1])

    async def spend(self, owner: str, charges: Sequence[Charge]) -> RateVerdict:
        if not charges:
            return _ALLOWED
        budgets = _budgets(charges)
        key = (owner, budgets)
        now = self._local_clock()
        held = self._held(key, now)
        if held is not None:
            return held
        lease = self._leases.get(key)
        if lease is not None and lease.left > 0 and lease.until > now:
            lease.left -= 1
            return _ALLOWED
        cap = min(MAX_LEASE, *(burst // LEASE_SHARE for _, _, burst in budgets))
        want = _lease_size(lease, cap, now)
        args: list[str | int] = [str(self._clock()) if self._clock is not None else "", want]
        for _, interval, burst in budgets:
            args += [interval, burst]
        reply = await self._spend.call([bucket_key(owner, c.bucket) for c in charges], args)
        if reply[0]:
            granted, wait, at = int(reply[1]), int(reply[2]), int(reply[3])
            if cap > 1:  # a leasable budget: its lease, even of one call, sizes the next one
                self._remember(self._leases, now)
                self._leases[key] = _Lease(left=granted - 1, until=now + LEASE_US, size=want)
            if wait > 0 and granted == 1:
                # This call spent the last of a budget: the next is refused for `wait`, certainly.
                self._hold(key, now, wait, charges[at - 1].bucket)
            return _ALLOWED
        wait, bucket = int(reply[1]), charges[int(reply[2]) - 1].bucket
        self._hold(key, now, wait, bucket)
        self._leases.pop(key, None)
        return RateVerdict(allowed=False, retry_after=retry_after_seconds(wait), bucket=bucket)

    def _hold(self, key: _Key, now: int, wait: int, bucket: str) -> None:
        """Remember that checks of `key` are refused by `bucket` for `wait` from `now` (local time taken
        before the round trip, so the hold ends no later than Redis' own verdict changes)."""
        self._remember(self._refused, now)
        self._refused[key] = (now + wait, bucket)

    def _remember(self, table: dict[_Key, Any], now: int) -> None:
        """Make room in `table` for one more entry: drop what has run out, and everything if that is not enough."""
        if len(table) < self._remembered:
            return
        live = {key: value for key, value in table.items() if _until(value) > now}
        table.clear()
        if len(live) < self._remembered:
            table.update(live)


_Key = tuple[str, tuple[tuple[str, int, int], ...]]


def _budgets(charges: Sequence[Charge]) -> tuple[tuple[str, int, int], ...]:
    return tuple((c.bucket, interval_us(c.budget), c.budget.burst) for c in charges)


def _until(value: _Lease | tuple[int, str]) -> int:
    return value.until if isinstance(value, _Lease) else value[0]


def _lease_size(lease: _Lease | None, cap: int, now: int) -> int:
    """How many calls the next round trip spends: one at first; twice the last lease when it was used up
    within its time, half of it when calls were forfeit; never more than `cap`."""
    if cap <= 1 or lease is None:
        return 1
    size = lease.size * 2 if lease.left == 0 and lease.until > now else lease.size // 2
    return max(1, min(cap, size))
