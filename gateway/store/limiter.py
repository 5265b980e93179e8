"""Rate budgets in Redis, shared by every gateway process: GCRA in one atomic script per check.

Who calls it: the executor's agent path, through the `gateway.limiter.RateLimiter` Protocol, once
per tool call that passed access. One check is one ``EVALSHA``, however many budgets it spends
from (the class budget and the tool's own): the script reads every budget, and writes them only
when all of them allow the call, so a refusal spends nothing.

Time is the server's (``redis.call('TIME')``), never a process's: two gateways whose clocks
disagree still share one budget. Tests may pass a clock in; the script then uses that instead.

A refusal is remembered in process for as long as it certainly holds (its wait: a budget refills
only with time), so a flood past its budget is answered without a round trip.

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
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from gateway.limiter import Charge, RateVerdict, interval_us, monotonic_us, retry_after_seconds
from gateway.store.client import store_boundary

__all__ = ["SPEND_SCRIPT", "RedisRateLimiter", "bucket_key"]

SPEND_SCRIPT = """
-- KEYS: one budget each. ARGV[1]: now in microseconds, or '' for the server's clock; then, per
-- key, its interval (us) and burst. Returns {allowed, wait_us, index of the refusing key}.
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local tats = {}
local worst, worst_at = 0, 0
for i = 1, #KEYS do
  local interval, burst = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local tat = tonumber(redis.call('GET', KEYS[i])) or now
  if tat < now then tat = now end
  tats[i] = tat + interval
  local over = tats[i] - now - interval * burst
  if over > worst then worst, worst_at = over, i end
end
-- Every guard before the first write: a refusal by any budget spends from none.
if worst_at > 0 then return {0, worst, worst_at} end
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], string.format('%.0f', tats[i]), 'PX', math.ceil((tats[i] - now) / 1000))
end
return {1, 0, 0}
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
        # A budget only refills with time, and every other process's spends only push it further out,
        # so a refusal with a wait of W holds, everywhere, for W: repeating it needs no round trip.
        # A flood past its budget is then answered from here and costs Redis nothing.
        self._refused: dict[tuple[str, tuple[tuple[str, int, int], ...]], tuple[int, str]] = {}

    async def spend(self, owner: str, charges: Sequence[Charge]) -> RateVerdict:
        if not charges:
            return RateVerdict(allowed=True)
        budgets = tuple((c.bucket, interval_us(c.budget), c.budget.burst) for c in charges)
        now = self._local_clock()
        held = self._refused.get((owner, budgets))
        if held is not None and held[0] > now:
            return RateVerdict(allowed=False, retry_after=retry_after_seconds(held[0] - now), bucket=held[1])
        args: list[str | int] = [str(self._clock()) if self._clock is not None else ""]
        for _, interval, burst in budgets:
            args += [interval, burst]
        allowed, wait_us, at = await self._spend.call([bucket_key(owner, c.bucket) for c in charges], args)
        if allowed:
            return RateVerdict(allowed=True)
        bucket = charges[int(at) - 1].bucket
        if len(self._refused) >= self._remembered:
            self._refused = {key: value for key, value in self._refused.items() if value[0] > now}
            if len(self._refused) >= self._remembered:
                self._refused.clear()
        self._refused[(owner, budgets)] = (now + int(wait_us), bucket)
        return RateVerdict(allowed=False, retry_after=retry_after_seconds(int(wait_us)), bucket=bucket)
