"""Load for the flood benchmark: ``python -m bench._flood_load``, driven by JSON lines on stdin.

On `bench._engine` (the command loop, the cheap client, the closed loop and the measured window), with
the request and the checks of `bench._load`. Two of these run at once, each its own process on the load
core, so the steady sender's timing is not delayed by the flood's event loop:

* ``{"cmd": "flood", "url", "token", "concurrency", "warmup", "duration", "server_pid"}``: closed-loop
  workers calling as fast as the gateway answers (its capacity), counting answers by outcome
  (``ok``, ``RATE_LIMITED``, anything else). The server's CPU is read at the window's edges.
* ``{"cmd": "steady", "url", "token", "rate", "warmup", "duration"}``: one call every ``1 / rate``
  seconds on its own schedule (open loop, so a slow answer does not lower the rate), each checked
  for success; latencies of the calls started inside the window.
* ``{"cmd": "limiter", "redis_url", "checks", "concurrency"}``: the limiter's own cost: `checks`
  calls of `RedisRateLimiter.spend` in this process, `concurrency` at a time, against the bench's
  Redis; CPU seconds of this process per check (run it pinned to the server's core).
* ``{"cmd": "quit"}``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import aiohttp

from bench._engine import Command, Meter, Run, client_session, closed_loop, json_rpc_message, main, post
from bench._harness import percentile
from bench._load import call_body, failure_of, modern_headers


def _outcome(status: int, raw: bytes, content_type: str) -> str:
    failure = failure_of(status, raw, content_type)
    if failure != "tool_error":
        return failure or "ok"
    result = json_rpc_message(raw, content_type)["result"]
    return str(result.get("structuredContent", {}).get("error", {}).get("code", "tool_error"))


async def flood(command: Command) -> dict[str, Any]:
    url, headers = command["url"], modern_headers(command["token"])
    outcomes: list[tuple[float, str]] = []
    state = Run()

    async def worker(session: aiohttp.ClientSession, index: int) -> None:
        request = 0
        while not state.stop:
            request += 1
            outcome = await post(session, url, call_body(index * 10_000_000 + request, "modern"), headers, _outcome)
            outcomes.append((time.perf_counter(), outcome))

    async with client_session() as session:
        workers = [worker(session, i) for i in range(int(command["concurrency"]))]
        meter = Meter([int(command["server_pid"])])
        window = await closed_loop(
            state, workers, meter, warmup=float(command["warmup"]), duration=float(command["duration"])
        )
    counted = Counter(outcome for at, outcome in outcomes if window.holds(at))
    calls = sum(counted.values())
    return {
        "calls_per_s": calls / window.seconds,
        "outcomes": dict(counted),
        "server_cpu_us_per_call": window.server_cpu / calls * 1e6 if calls else float("nan"),
        "server_cpu_share": window.server_cpu / window.seconds,
    }


async def steady(command: Command) -> dict[str, Any]:
    url, headers = command["url"], modern_headers(command["token"])
    interval, warmup, duration = 1 / float(command["rate"]), float(command["warmup"]), float(command["duration"])
    results: list[tuple[float, float, str]] = []

    async def one(request: int, started: float) -> None:
        outcome = await post(session, url, call_body(request, "modern"), headers, _outcome)
        results.append((started, time.perf_counter() - started, outcome))

    async with client_session() as session:
        begin = time.perf_counter()
        tasks, request = [], 0
        while (due := begin + request * interval) < begin + warmup + duration:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            request += 1
            tasks.append(asyncio.create_task(one(request, time.perf_counter())))
        await asyncio.gather(*tasks)
    window = [(latency, outcome) for started, latency, outcome in results if started >= begin + warmup]
    latencies = sorted(latency for latency, outcome in window if outcome == "ok")
    return {
        "calls": len(window),
        "outcomes": dict(Counter(outcome for _, outcome in window)),
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
    }


async def limiter(command: Command) -> dict[str, Any]:
    from gateway.limits.budgets import Budget
    from gateway.limits.rate_limiter import Charge
    from gateway.store.client import connect
    from gateway.store.rate_buckets import RedisRateLimiter

    # A generous read timeout: on a busy box a pause of the shared Redis must not end the measurement.
    connection = connect(command["redis_url"], timeout=10.0)
    spend = RedisRateLimiter(connection.client).spend
    # Budgets that never refuse: the cost measured is the check's, on the allowed path every call takes.
    reads = [Charge(bucket="reads", budget=Budget(per_minute=1e12, burst=10**12))]
    both = [*reads, Charge(bucket="tool:rooms_availability", budget=Budget(per_minute=1e12, burst=10**12))]
    checks, concurrency = int(command["checks"]), int(command["concurrency"])
    answer: dict[str, Any] = {}
    try:
        for name, charges in (("one_budget", reads), ("two_budgets", both)):

            async def worker(owner: str, charges: list[Charge] = charges) -> None:
                for _ in range(checks // concurrency):
                    await spend(owner, charges)

            await asyncio.gather(*(worker(f"warm{i}") for i in range(concurrency)))
            cpu0, t0 = time.process_time(), time.perf_counter()
            await asyncio.gather(*(worker(f"owner{i}") for i in range(concurrency)))
            cpu1, t1 = time.process_time(), time.perf_counter()
            done = checks // concurrency * concurrency
            answer[name] = {"cpu_us_per_check": (cpu1 - cpu0) / done * 1e6, "checks_per_s": done / (t1 - t0)}
    finally:
        await connection.aclose()
    return answer


if __name__ == "__main__":
    main({"flood": flood, "steady": steady, "limiter": limiter})
