"""Rate limits under a flood: does one key flooding the gateway hurt a second key's latency?

What runs. The gateway (`create_app`, the default ``[limits]``: reads 1,200/min burst 100 per
principal) on one core; Redis, the demo backends and two load processes (`bench._flood_load`) on the
other. Two agent keys of two subjects call ``rooms_availability``:

* **flood**: closed-loop workers (``--flood-concurrency``, default 8) calling as fast as the gateway
  answers, i.e. at its capacity; almost every call past the first burst is ``RATE_LIMITED``;
* **steady**: an open-loop sender at ``--steady-rate`` calls/s (default 10, within its budget).

Each round measures the steady key alone (baseline), with the flood, and with the same flood
against a second gateway process whose budgets never refuse (what the flood would cost without
limits), back to back, rotating the order; the steady key's p50/p99 are compared with its baseline
by per-round ratios. A second part measures the limiter's own cost: `RedisRateLimiter.spend`
called in a process pinned to the server's core against the same Redis, CPU seconds per check, one
at a time and 8 / 32 at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._harness import Child, Pinning, median, pin_self, redis_server, spread, start_python  # noqa: E402
from bench._servers import fresh_secrets  # noqa: E402

LATENCY_RATIO_TARGET = 2.0
LIMITER_CPU_TARGET_US = 50.0
LIMITER_LEVELS = (1, 8, 32)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python bench/flood.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--duration", type=float, default=4.0, help="measured seconds per phase (default 4)")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each phase (default 1)")
    parser.add_argument("--flood-concurrency", type=int, default=8, help="flood workers (default 8)")
    parser.add_argument("--steady-rate", type=float, default=10.0, help="steady key's calls/s (default 10)")
    parser.add_argument("--limiter-checks", type=int, default=20_000, help="checks per limiter measurement")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 rounds of 2 s")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write raw numbers here")
    parser.add_argument("--server-cpu", type=int, default=None)
    parser.add_argument("--other-cpu", type=int, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.duration, args.warmup, args.limiter_checks = 2, 2.0, 0.5, 4_000
    return args


def _keys(redis_url: str) -> tuple[str, str]:
    """Agent keys of two subjects: their budgets are their own."""
    import redis.asyncio as aioredis

    from gateway.principal import KeyKind
    from gateway.store.keys import KeyStore

    async def create() -> tuple[str, str]:
        client = aioredis.from_url(redis_url)
        try:
            store = KeyStore(client)
            flood, _ = await store.create(kind=KeyKind.AGENT, subject="flood@acme.example", org="acme", roles=())
            steady, _ = await store.create(kind=KeyKind.AGENT, subject="steady@acme.example", org="acme", roles=())
            return flood, steady
        finally:
            await client.aclose()

    return asyncio.run(create())


@contextlib.contextmanager
def started(pinning: Pinning, log_dir: Path) -> Iterator[dict[str, Any]]:
    with contextlib.ExitStack() as stack:
        redis, redis_url = stack.enter_context(redis_server(pinning.others, log_dir))
        secrets = fresh_secrets()

        def start(name: str, module: str, argv: list[str], cores: frozenset[int], **kw: Any) -> Child:
            child = start_python(name, module, argv, cores=cores, log_dir=log_dir, env=secrets, **kw)
            stack.callback(child.stop)
            return child

        backends = start("backends", "bench._servers", ["backends"], pinning.others)
        flood_key, steady_key = _keys(redis_url)
        argv = ["gateway", "--redis-url", redis_url, "--rooms-url", backends.ready["rooms"]]
        argv += ["--orders-url", backends.ready["orders"], "--no-worker"]
        gateways = {
            "limited": start("limited", "bench._servers", [*argv, "--default-limits"], pinning.server),
            "unlimited": start("unlimited", "bench._servers", argv, pinning.server),
        }
        loads = {name: start(name, "bench._flood_load", [], pinning.others, interactive=True) for name in ("f", "s")}
        for load in loads.values():
            stack.callback(_quit, load)
        meter = start("meter", "bench._flood_load", [], pinning.server, interactive=True)
        stack.callback(_quit, meter)
        yield {
            "gateways": gateways,
            "redis_url": redis_url,
            "flood": (loads["f"], flood_key),
            "steady": (loads["s"], steady_key),
            "meter": meter,
        }


def _quit(child: Child) -> None:
    with contextlib.suppress(OSError, ValueError):
        child.send({"cmd": "quit"})


PHASES = ("baseline", "flood", "unlimited_flood")
"""Steady key alone; with the flood on the gateway with the default limits; with it on the one without."""


def phase(stack: dict[str, Any], args: argparse.Namespace, name: str) -> dict[str, Any]:
    timing = {"warmup": args.warmup, "duration": args.duration}
    gateway: Child = stack["gateways"]["unlimited" if name == "unlimited_flood" else "limited"]
    url = f"{gateway.ready['url']}/mcp"
    steady, steady_key = stack["steady"]
    flood, flood_key = stack["flood"]
    if name != "baseline":
        flood.send(
            {
                "cmd": "flood",
                "url": url,
                "token": flood_key,
                "concurrency": args.flood_concurrency,
                "server_pid": gateway.pid,
                **timing,
            }
        )
    steady.send({"cmd": "steady", "url": url, "token": steady_key, "rate": args.steady_rate, **timing})
    result = {"steady": steady.receive(args.warmup + args.duration + 60)}
    if name != "baseline":
        result["flood"] = flood.receive(args.warmup + args.duration + 60)
    return result


def limiter_cost(stack: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    meter: Child = stack["meter"]
    costs = {}
    for level in LIMITER_LEVELS:
        meter.send(
            {"cmd": "limiter", "redis_url": stack["redis_url"], "checks": args.limiter_checks, "concurrency": level}
        )
        costs[str(level)] = meter.receive(600)
    return costs


def report(rounds: list[dict[str, Any]], costs: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    def steady(name: str, metric: str) -> list[float]:
        return [r[name]["steady"][metric] for r in rounds]

    def ratio(name: str, metric: str) -> list[float]:
        return [r[name]["steady"][metric] / r["baseline"]["steady"][metric] for r in rounds]

    print(f"Steady key at {args.steady_rate:g} calls/s; flood key with {args.flood_concurrency} closed-loop workers")
    print(f"{'':16} {'baseline':>9} {'flood':>8} {'flood/base':>17} {'no-limit flood':>15} {'its/base':>17}")
    summary: dict[str, Any] = {}
    for metric in ("p50_ms", "p99_ms"):
        cells = [f"{median(steady('baseline', metric)):9.2f}"]
        for name in ("flood", "unlimited_flood"):
            low, high = spread(ratio(name, metric))
            summary[f"{name}_{metric}_ratio"] = median(ratio(name, metric))
            width = 8 if name == "flood" else 15
            cells += [
                f"{median(steady(name, metric)):{width}.2f}",
                f"{median(ratio(name, metric)):6.2f} [{low:.2f}-{high:.2f}]",
            ]
        print(f"steady {metric:9} " + " ".join(cells))
    outcomes: dict[str, int] = {}
    for r in rounds:
        for name in PHASES:
            for outcome, count in r[name]["steady"]["outcomes"].items():
                outcomes[outcome] = outcomes.get(outcome, 0) + count
    print(f"steady key outcomes over all phases and rounds: {outcomes}")
    for name in ("flood", "unlimited_flood"):
        floods = [r[name]["flood"] for r in rounds]
        limited = sum(f["outcomes"].get("RATE_LIMITED", 0) for f in floods)
        total = sum(sum(f["outcomes"].values()) for f in floods)
        cpu = median([f["server_cpu_us_per_call"] for f in floods])
        busy = median([f["server_cpu_share"] for f in floods])
        print(
            f"{name}: {median([f['calls_per_s'] for f in floods]):,.0f} calls/s answered, {limited / total:.1%} "
            f"RATE_LIMITED, server CPU {cpu:,.0f} µs per call, server core {busy:.0%} busy"
        )
    print("\nLimiter cost (RedisRateLimiter.spend, in a process on the server's core), CPU µs per check:")
    for level, cost in costs.items():
        one, two = cost["one_budget"], cost["two_budgets"]
        print(
            f"  {level:>2} at once: one budget {one['cpu_us_per_check']:6.1f} ({one['checks_per_s']:,.0f}/s), "
            f"two budgets {two['cpu_us_per_check']:6.1f} ({two['checks_per_s']:,.0f}/s)"
        )
    print("\nTargets")
    for metric in ("p50_ms", "p99_ms"):
        value = summary[f"flood_{metric}_ratio"]
        name = f"steady {metric[:3]} with flood / baseline"
        print(f"  {name:40} {value:6.2f} x   target <= 2x      {'PASS' if value <= LATENCY_RATIO_TARGET else 'MISS'}")
    for level, cost in costs.items():
        value = cost["one_budget"]["cpu_us_per_check"]
        verdict = "PASS" if value <= LIMITER_CPU_TARGET_US else "MISS"
        print(f"  {'limiter CPU per check, ' + level + ' at once':40} {value:6.1f} µs  target <= 50 µs   {verdict}")
    return summary


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _on_sigterm)
    pinning = Pinning.choose(args.server_cpu, args.other_cpu)
    pin_self(pinning.others)
    print(f"flood benchmark; {pinning.describe()}", file=sys.stderr)
    begun = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-flood-") as log_dir:
        try:
            with started(pinning, Path(log_dir)) as stack:
                rounds = []
                for index in range(args.rounds):
                    record: dict[str, Any] = {}
                    for name in PHASES[index % 3 :] + PHASES[: index % 3]:
                        record[name] = phase(stack, args, name)
                        time.sleep(1.0)  # let the server settle between phases
                    rounds.append(record)
                    print(f"round {index + 1}: {json.dumps(record)[:300]}", file=sys.stderr)
                costs = limiter_cost(stack, args)
        except KeyboardInterrupt:
            print("interrupted; everything started was stopped", file=sys.stderr)
            return 130
    summary = report(rounds, costs, args)
    print(f"\n(total {time.monotonic() - begun:.0f} s)")
    if args.json is not None:
        args.json.write_text(json.dumps({"rounds": rounds, "limiter": costs, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
