"""Read-path overhead of the gateway against a bare MCP SDK server doing the same I/O.

What is compared. Both servers answer ``tools/call rooms_availability`` over the same Streamable
HTTP configuration (a stateful `StreamableHTTPSessionManager` serving both protocol eras), call the
same rooms backend process (``GET /rooms/room-atlas/availability?date=...`` with the identity
headers) and write one audit entry to the same Redis (``XADD``):

* **gateway**: `gateway.runtime.app.create_app` (bearer-key lookup in Redis, access policy, argument and
  output validation, untrusted-text withholding, envelope, audit event, the backend call through
  the gateway's aiohttp client `gateway.outbound.backend_client.AiohttpUpstream`);
* **bare**: a low-level SDK `Server` whose one tool makes the backend call with one shared
  `aiohttp.ClientSession` and one ``XADD`` (see `bench._servers`). This is the floor: what any MCP
  server in Python with this SDK pays for the same work. The difference is what the gateway adds.

How. Each server runs under uvicorn in its own process, pinned to one core; the load generator, the
backends and Redis share the other core (``--server-cpu``/``--other-cpu``). The load generator is a
separate process sending raw JSON-RPC POSTs with aiohttp (it validates every answer, see
`bench._load`). Each round runs, for every concurrency level, gateway and bare back to back for
the same duration after a short warm-up, alternating which goes first. Per run: calls/s, client-side
p50/p99, and server CPU per call (utime+stime from ``/proc/<pid>/stat`` across the window / calls).

Why interleaved rounds and medians of per-round ratios. This box's speed drifts by tens of percent
over minutes (other tenants, thermal and frequency changes). Running both servers close together
within a round exposes them to the same conditions; the per-round ratio (or difference) cancels
most of the drift, and the median over rounds discards the odd disturbed round. Comparing medians
of absolute numbers instead would mix conditions from different moments.

Run: ``python bench/read_path.py`` (about 2 minutes), ``--quick`` for a smoke run (about 25 s),
``--json PATH`` for raw per-round numbers, ``--era both`` to also measure the 2025-11-25 session era
(about 3.7 minutes). ``bench/profile_read_path.py`` shows where the difference goes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import platform
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import FrameType
from typing import Any

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._harness import (  # noqa: E402
    ROOT,
    Child,
    Pinning,
    cpu_seconds,
    median,
    memory_kib,
    pin_self,
    redis_server,
    spread,
    start_python,
)
from bench._servers import BARE_AUDIT_STREAM, SUBJECT, fresh_secrets  # noqa: E402

SERVERS = ("gateway", "bare")
GATEWAY_AUDIT_STREAM = "countersign:audit"
IDLE_WARMUP_SECONDS = 1.0
IDLE_WARMUP_CONCURRENCY = 8

THROUGHPUT_RATIO_TARGET = 0.9  # issue 15: reads >= 0.9x the bare SDK server at c=8 and c=32
ADDED_CPU_TARGET_US = 150.0
ADDED_P50_TARGET_MS = 0.3
ADDED_RSS_TARGET_MIB = 25.0


# --- options ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/read_path.py", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--duration", type=float, default=3.0, help="measured seconds per run (default 3)")
    parser.add_argument("--warmup", type=float, default=0.5, help="unmeasured seconds before each run (default 0.5)")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated levels (default 1,8,32)")
    parser.add_argument(
        "--era",
        choices=("modern", "legacy", "both"),
        default="modern",
        help="modern: stateless 2026-07-28 envelope (default); legacy: 2025-11-25 sessions",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 rounds of 1 s (numbers are indicative)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write raw per-round numbers here")
    parser.add_argument("--server-cpu", type=int, default=None, help="core for the server under test")
    parser.add_argument("--other-cpu", type=int, default=None, help="core for load generator, backends, Redis")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop", help="event loop of both servers")
    parser.add_argument(
        "--appendfsync",
        choices=("everysec", "always"),
        default="everysec",
        help="AOF fsync policy of the bench's Redis (the product ships always)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.duration, args.warmup = 2, 1.0, 0.3
    args.levels = [int(level) for level in args.concurrency.split(",") if level.strip()]
    args.eras = ["modern", "legacy"] if args.era == "both" else [args.era]
    if args.rounds < 1 or args.duration <= 0 or not args.levels or min(args.levels) < 1:
        parser.error("rounds, duration and concurrency levels must be positive")
    return args


def estimated_seconds(args: argparse.Namespace) -> float:
    runs = args.rounds * len(args.levels) * len(args.eras) * len(SERVERS)
    return float(runs * (args.duration + args.warmup + 0.3) + 15)


# --- the stack ----------------------------------------------------------------------------------


@dataclass
class Stack:
    """Everything started for one benchmark run."""

    redis: Child
    redis_url: str
    backends: Child
    servers: dict[str, Child]
    load: Child
    token: str
    successful_calls: Counter[str] = field(default_factory=Counter)
    """Successful tools/call answers per server, warm-ups and checks included (each must leave one audit entry)."""

    def url(self, server: str) -> str:
        return f"{self.servers[server].ready['url']}/mcp"

    @property
    def service_pids(self) -> list[int]:
        return [self.redis.pid, self.backends.pid]


def create_key(redis_url: str) -> str:
    """A demo agent key for the gateway, created in Redis before any load."""
    import redis.asyncio as aioredis

    from gateway.principal import KeyKind
    from gateway.store.keys import KeyStore

    async def create() -> str:
        client = aioredis.from_url(redis_url)
        try:
            token, _ = await KeyStore(client).create(kind=KeyKind.AGENT, subject=SUBJECT, org="acme", roles=("staff",))
            return token
        finally:
            await client.aclose()

    return asyncio.run(create())


@contextlib.contextmanager
def started_stack(args: argparse.Namespace, pinning: Pinning, log_dir: Path) -> Iterator[Stack]:
    """Redis, the backends, both servers and the load generator; all stopped on the way out."""
    with contextlib.ExitStack() as stack:
        redis, redis_url = stack.enter_context(redis_server(pinning.others, log_dir, appendfsync=args.appendfsync))
        tokens = fresh_secrets()

        def start(name: str, module: str, argv: list[str], cores: frozenset[int], **kw: Any) -> Child:
            child = start_python(name, module, argv, cores=cores, log_dir=log_dir, env=tokens, **kw)
            stack.callback(child.stop)
            return child

        backends = start("backends", "bench._servers", ["backends"], pinning.others)
        rooms, orders = backends.ready["rooms"], backends.ready["orders"]
        token = create_key(redis_url)
        common = ["--redis-url", redis_url, "--rooms-url", rooms]
        gateway_argv = ["--loop", args.loop, "gateway", *common, "--orders-url", orders]
        servers = {
            "gateway": start("gateway", "bench._servers", gateway_argv, pinning.server),
            "bare": start("bare", "bench._servers", ["--loop", args.loop, "bare", *common], pinning.server),
        }
        load = start("load", "bench._load", [], pinning.others, interactive=True)
        stack.callback(_quit, load)
        yield Stack(redis=redis, redis_url=redis_url, backends=backends, servers=servers, load=load, token=token)


def _quit(load: Child) -> None:
    with contextlib.suppress(OSError, ValueError):
        load.send({"cmd": "quit"})


# --- driving the load generator -----------------------------------------------------------------


def verify(stack: Stack, eras: Sequence[str]) -> dict[str, Any]:
    """One call through the official client and one raw call, against both servers, in each era."""
    checks = {}
    for era in eras:
        for server in SERVERS:
            stack.load.send({"cmd": "verify", "url": stack.url(server), "token": stack.token, "era": era})
            checks[f"{server}/{era}"] = stack.load.receive(30)
            stack.successful_calls[server] += 2  # one through mcp.Client, one raw
    return checks


def measure(stack: Stack, server: str, era: str, concurrency: int, warmup: float, duration: float) -> dict[str, Any]:
    """One closed-loop run against one server."""
    stack.load.send(
        {
            "cmd": "run",
            "url": stack.url(server),
            "token": stack.token,
            "era": era,
            "concurrency": concurrency,
            "warmup": warmup,
            "duration": duration,
            "server_pid": stack.servers[server].pid,
            "service_pids": stack.service_pids,
        }
    )
    result = stack.load.receive(warmup + duration + 60)
    stack.successful_calls[server] += result["calls_total"]
    return result


def idle_memory(stack: Stack, era: str) -> dict[str, dict[str, float]]:
    """VmRSS of each server right after startup and a short warm-up (MiB)."""
    memory = {}
    for server in SERVERS:
        measure(stack, server, era, IDLE_WARMUP_CONCURRENCY, 0.0, IDLE_WARMUP_SECONDS)
        memory[server] = {"rss_mib": memory_kib(stack.servers[server].pid) / 1024}
    return memory


def run_rounds(stack: Stack, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every round: each era and level, both servers back to back, alternating which goes first."""
    records = []
    for round_index in range(args.rounds):
        for era in args.eras:
            for level_index, concurrency in enumerate(args.levels):
                order = SERVERS if (round_index + level_index) % 2 == 0 else SERVERS[::-1]
                record: dict[str, Any] = {"round": round_index + 1, "era": era, "concurrency": concurrency}
                record["order"] = list(order)
                for server in order:
                    record[server] = measure(stack, server, era, concurrency, args.warmup, args.duration)
                records.append(record)
                _progress(record)
    return records


def _progress(record: dict[str, Any]) -> None:
    gateway, bare = record["gateway"], record["bare"]
    print(
        f"  round {record['round']} {record['era']:<6} c={record['concurrency']:<3} "
        f"gateway {gateway['calls_per_s']:7.0f}/s {gateway['server_cpu_us_per_call']:6.0f} µs  "
        f"bare {bare['calls_per_s']:7.0f}/s {bare['server_cpu_us_per_call']:6.0f} µs",
        file=sys.stderr,
        flush=True,
    )


# --- summary ------------------------------------------------------------------------------------

_METRICS = (
    "calls_per_s",
    "p50_ms",
    "p99_ms",
    "server_cpu_us_per_call",
    "server_cpu_share",
    "services_cpu_us_per_call",
    "load_cpu_us_per_call",
    "other_core_share",
)


def summarize(records: Sequence[dict[str, Any]], eras: Sequence[str], levels: Sequence[int]) -> dict[str, Any]:
    """Medians over rounds per server, and medians (with min-max) of per-round ratios and differences."""
    summary: dict[str, Any] = {}
    for era in eras:
        for level in levels:
            rows = [r for r in records if r["era"] == era and r["concurrency"] == level]
            entry: dict[str, Any] = {
                server: {metric: median([r[server][metric] for r in rows]) for metric in _METRICS} for server in SERVERS
            }
            for server in SERVERS:
                entry[server]["failures"] = sum(sum(r[server]["failures"].values()) for r in rows)
            derived = {
                "throughput_ratio": [r["gateway"]["calls_per_s"] / r["bare"]["calls_per_s"] for r in rows],
                "added_cpu_us": [_diff(r, "server_cpu_us_per_call") for r in rows],
                "added_p50_ms": [_diff(r, "p50_ms") for r in rows],
                "added_p99_ms": [_diff(r, "p99_ms") for r in rows],
            }
            for name, values in derived.items():
                entry[name] = {"median": median(values), "range": spread(values), "per_round": values}
            summary[f"{era}/c={level}"] = entry
    return summary


def _diff(record: dict[str, Any], metric: str) -> float:
    return float(record["gateway"][metric] - record["bare"][metric])


@dataclass(frozen=True)
class Check:
    """One target beside its measured value."""

    label: str
    measured: float
    spread: tuple[float, float] | None
    target: str
    passed: bool
    unit: str


def checks(summary: dict[str, Any], memory: dict[str, Any], eras: Sequence[str], levels: Sequence[int]) -> list[Check]:
    """The targets, per era: throughput ratio at c >= 8, added CPU at every level, added p50 at c=1, idle RSS."""
    found = []
    for era in eras:
        for level in levels:
            entry = summary[f"{era}/c={level}"]
            if level >= 8:
                ratio = entry["throughput_ratio"]
                found.append(
                    Check(
                        f"{era}: throughput gateway/bare, c={level}",
                        ratio["median"],
                        ratio["range"],
                        f">= {THROUGHPUT_RATIO_TARGET:.2f}x",
                        ratio["median"] >= THROUGHPUT_RATIO_TARGET,
                        "x",
                    )
                )
        for level in levels:
            cpu = summary[f"{era}/c={level}"]["added_cpu_us"]
            found.append(
                Check(
                    f"{era}: added server CPU per call, c={level}",
                    cpu["median"],
                    cpu["range"],
                    f"<= {ADDED_CPU_TARGET_US:.0f} µs",
                    cpu["median"] <= ADDED_CPU_TARGET_US,
                    "µs",
                )
            )
        if 1 in levels:
            p50 = summary[f"{era}/c=1"]["added_p50_ms"]
            found.append(
                Check(
                    f"{era}: added p50 latency, c=1",
                    p50["median"],
                    p50["range"],
                    f"<= {ADDED_P50_TARGET_MS:.1f} ms",
                    p50["median"] <= ADDED_P50_TARGET_MS,
                    "ms",
                )
            )
    added_rss = memory["gateway"]["rss_mib"] - memory["bare"]["rss_mib"]
    found.append(
        Check(
            "idle RSS, gateway - bare",
            added_rss,
            None,
            f"<= {ADDED_RSS_TARGET_MIB:.0f} MiB",
            added_rss <= ADDED_RSS_TARGET_MIB,
            "MiB",
        )
    )
    return found


# --- report -------------------------------------------------------------------------------------


def _versions() -> dict[str, str]:
    names = ("mcp", "mcp-types", "starlette", "uvicorn", "uvloop", "httptools", "redis", "aiohttp", "httpx")
    found = {}
    for name in (*names, "pydantic"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def _redis_version(redis_url: str) -> str:
    import redis

    with redis.Redis.from_url(redis_url) as client:
        info: Any = client.info("server")
        if "valkey_version" in info:
            return f"valkey {info['valkey_version']}"
        return f"redis {info['redis_version']}"


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def git_revision() -> str:
    """The commit measured, and whether the gateway's code differed from it."""
    import subprocess

    def git(*argv: str) -> str:
        done = subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, timeout=10, check=False)
        return done.stdout.strip()

    revision = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "gateway", "adapters", "policies", "backends")
    return f"{revision}{' + uncommitted changes' if dirty else ''}"


def environment(stack: Stack, args: argparse.Namespace, pinning: Pinning) -> dict[str, Any]:
    gateway = stack.servers["gateway"].ready
    return {
        "revision": git_revision(),
        "python": platform.python_version(),
        "versions": _versions(),
        "redis_server": _redis_version(stack.redis_url) + f" (appendonly yes, appendfsync {args.appendfsync}, save '')",
        "cpu": _cpu_model(),
        "pinning": pinning.describe(),
        "server_runtime": f"uvicorn, loop {gateway['loop']}, http {gateway['http']}, no access log",
        "transport": "StreamableHTTPSessionManager(stateless=False), SSE-capable responses, DNS-rebinding check on",
        "rounds": args.rounds,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "levels": args.levels,
        "eras": args.eras,
    }


def _fmt(value: float, digits: int = 0) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.{digits}f}"


def _ranged(derived: dict[str, Any], digits: int) -> str:
    """``median [min-max]`` of a per-round ratio or difference."""
    low, high = derived["range"]
    return f"{_fmt(derived['median'], digits)} [{_fmt(low, digits)}-{_fmt(high, digits)}]"


def _other_core_line(summary: dict[str, Any], era: str, levels: Sequence[int]) -> str:
    """Where the other core's time went, to show whether the client side is the bottleneck: the ceiling
    is the calls a second that core could carry for a server at the measured cost per call (load
    generator, backends and Redis), which no server's throughput here can pass."""
    parts = []
    for level in levels:
        entry = summary[f"{era}/c={level}"]

        def pair(metric: str, entry: dict[str, Any] = entry) -> str:
            return "/".join(_fmt(entry[server][metric]) for server in SERVERS)

        shares = "/".join(f"{entry[server]['other_core_share']:.0%}" for server in SERVERS)
        ceilings = "/".join(_fmt(_ceiling(entry[server])) for server in SERVERS)
        parts.append(
            f"c={level}: backends+Redis {pair('services_cpu_us_per_call')}, "
            f"load generator {pair('load_cpu_us_per_call')}, busy {shares}, ceiling {ceilings} calls/s"
        )
    return "Other core, µs per call gw/bare: " + "; ".join(parts)


def _ceiling(server: dict[str, Any]) -> float:
    """Calls a second the other core could carry at `server`'s measured cost per call there."""
    per_call = server["services_cpu_us_per_call"] + server["load_cpu_us_per_call"]
    return 1e6 / per_call if per_call > 0 else math.nan


def print_report(
    env: dict[str, Any], summary: dict[str, Any], memory: dict[str, Any], found: list[Check], extra: dict[str, Any]
) -> None:
    print()
    print("Countersign read path: gateway vs bare MCP SDK server, tools/call rooms_availability")
    print(
        f"{env['rounds']} interleaved rounds x {env['duration_s']:g} s per run (+{env['warmup_s']:g} s warm-up); "
        "per-server values are medians over rounds; ratios and deltas are medians of per-round values [min-max]"
    )
    for era in env["eras"]:
        label = "2026-07-28 stateless envelope" if era == "modern" else "2025-11-25 sessions (one per connection)"
        print(f"\nEra: {label}")
        header = (
            f"{'c':>3} | {'calls/s gw':>10} {'bare':>7} {'gw/bare':>20} | {'p50 ms gw':>9} {'bare':>6} {'+d':>6} | "
            f"{'p99 ms gw':>9} {'bare':>6} | {'CPU µs/call gw':>14} {'bare':>6} {'+d':>18} | {'fail':>4}"
        )
        print(header)
        print("-" * len(header))
        for level in env["levels"]:
            entry = summary[f"{era}/c={level}"]
            gw, bare = entry["gateway"], entry["bare"]
            ratio, cpu, p50 = entry["throughput_ratio"], entry["added_cpu_us"], entry["added_p50_ms"]
            print(
                f"{level:>3} | {_fmt(gw['calls_per_s']):>10} {_fmt(bare['calls_per_s']):>7} {_ranged(ratio, 2):>20} | "
                f"{_fmt(gw['p50_ms'], 2):>9} {_fmt(bare['p50_ms'], 2):>6} {_fmt(p50['median'], 2):>6} | "
                f"{_fmt(gw['p99_ms'], 2):>9} {_fmt(bare['p99_ms'], 2):>6} | "
                f"{_fmt(gw['server_cpu_us_per_call']):>14} {_fmt(bare['server_cpu_us_per_call']):>6} "
                f"{_ranged(cpu, 0):>18} | {gw['failures'] + bare['failures']:>4}"
            )
        print(_other_core_line(summary, era, env["levels"]))
    gw_mem, bare_mem = memory["gateway"], memory["bare"]
    print(
        f"\nIdle RSS after startup + {IDLE_WARMUP_SECONDS:g} s warm-up: gateway {gw_mem['rss_mib']:.1f} MiB, "
        f"bare {bare_mem['rss_mib']:.1f} MiB; after all load (VmHWM): "
        f"gateway {gw_mem['end_rss_mib']:.1f} ({gw_mem['hwm_mib']:.1f}), "
        f"bare {bare_mem['end_rss_mib']:.1f} ({bare_mem['hwm_mib']:.1f}) MiB"
    )
    audit, calls = extra["audit"], extra["calls"]
    matched = all(audit[server] == calls[server] for server in SERVERS)
    verdict = "one per call" if matched else "MISMATCH: not one entry per successful call"
    print(
        f"Audit entries appended (the gateway's by its chain head, archived ones included): "
        f"gateway {audit['gateway']:,} ({audit['gateway_stream']:,} still in the stream) "
        f"for {calls['gateway']:,} successful calls, "
        f"bare {audit['bare']:,} for {calls['bare']:,} (warm-ups and checks included): {verdict}"
    )
    print("\nTargets")
    for check in found:
        measured = _fmt(check.measured, 2 if check.unit in ("x", "ms") else 1)
        if check.spread is not None:
            low, high = (_fmt(v, 2 if check.unit in ("x", "ms") else 0) for v in check.spread)
            measured += f" [{low}-{high}]"
        verdict = "PASS" if check.passed else "MISS"
        print(f"  {check.label:<44} {measured + ' ' + check.unit:>26}   target {check.target:<12} {verdict}")
    print("\nEnvironment")
    print(f"  Python {env['python']}; " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()))
    for key in ("revision", "redis_server", "cpu", "pinning", "server_runtime", "transport"):
        print(f"  {key}: {env[key]}")


# --- main ---------------------------------------------------------------------------------------


def _audit_counts(redis_url: str) -> dict[str, int]:
    """Entries each server appended in this run (its Redis is fresh). The gateway's archiver moves the
    entries past its retention (10,000) out of the stream while the load runs, so the stream's length
    undercounts them; the chain head's ``seq`` numbers every entry ever appended (`gateway.audit.chain`)."""
    import redis

    from gateway.store.audit_stream import audit_keys

    with redis.Redis.from_url(redis_url) as client:
        appended = int(client.hget(audit_keys(GATEWAY_AUDIT_STREAM)["head"], "seq") or 0)
        in_stream = int(client.xlen(GATEWAY_AUDIT_STREAM))
        return {"gateway": appended, "gateway_stream": in_stream, "bare": int(client.xlen(BARE_AUDIT_STREAM))}


def _end_memory(stack: Stack, memory: dict[str, dict[str, float]]) -> None:
    for server in SERVERS:
        pid = stack.servers[server].pid
        memory[server]["end_rss_mib"] = memory_kib(pid) / 1024
        memory[server]["hwm_mib"] = memory_kib(pid, "VmHWM") / 1024
        memory[server]["cpu_s_total"] = cpu_seconds(pid)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # Ctrl-C and SIGTERM unwind through the context managers that stop every process started here
    # (SIGINT explicitly too: a shell starting this in the background would otherwise leave it ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        pinning = Pinning.choose(args.server_cpu, args.other_cpu)
    except ValueError as error:
        print(f"read_path: {error}", file=sys.stderr)
        return 2
    pin_self(pinning.others)
    print(f"read path benchmark: about {estimated_seconds(args):.0f} s; {pinning.describe()}", file=sys.stderr)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-read-path-") as log_dir:
        try:
            with started_stack(args, pinning, Path(log_dir)) as stack:
                checked = verify(stack, args.eras)
                memory = idle_memory(stack, args.eras[0])
                records = run_rounds(stack, args)
                _end_memory(stack, memory)
                calls = dict(stack.successful_calls)
                extra = {"audit": _audit_counts(stack.redis_url), "calls": calls, "verify": checked}
                env = environment(stack, args, pinning)
        except KeyboardInterrupt:
            print("interrupted; everything started was stopped", file=sys.stderr)
            return 130
    summary = summarize(records, args.eras, args.levels)
    found = checks(summary, memory, args.eras, args.levels)
    print_report(env, summary, memory, found, extra)
    print(f"\n(total {time.monotonic() - started:.0f} s)")
    if args.json is not None:
        document = {"environment": env, "rounds": records, "summary": summary, "memory": memory, "extra": extra}
        document["targets"] = [asdict(check) for check in found]
        args.json.write_text(json.dumps(document, indent=2, default=str))
        print(f"raw numbers written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
