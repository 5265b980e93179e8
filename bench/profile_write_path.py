"""Where the gateway spends CPU on a write proposal: py-spy samples of the gateway and the bare servers.

Starts the stack of `bench.write_path` (same pinning, backends, Redis, load generator; the gateway
without its worker), then for each variant (gateway, bare+GET, bare) runs closed-loop ``rooms_book``
proposals at one concurrency level while ``py-spy record`` samples the server process from the other
core. It writes the collapsed stacks (``<variant>.txt``) and prints CPU microseconds per proposal by
bucket: the share of samples whose stack matches a bucket (first match wins), times the measured CPU
per call. Attribution is approximate, as in `bench.profile_read_path`.

Needs py-spy (``pip install py-spy``) and ptrace rights over the server processes.
Run: ``python bench/profile_write_path.py [--seconds 15] [--concurrency 8] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._harness import Pinning, pin_self  # noqa: E402
from bench.profile_read_path import SAMPLE_RATE_HZ, buckets  # noqa: E402
from bench.read_path import git_revision  # noqa: E402
from bench.write_path import DATABASES, PROCESS, TOOLS, Stack, propose_command, started_stack, verify  # noqa: E402
from bench.write_path import parse_args as write_args  # noqa: E402

VARIANTS = ("gateway", "bare+GET", "bare")
BUCKETS: tuple[tuple[str, str], ...] = (
    ("ledger create script (RedisLedger.propose)", r"RedisLedger\.propose"),
    ("preflight GET to the rooms backend", r"_room_exists|request_json|ClientSession\._request|AiohttpUpstream"),
    ("audit XADD and other Redis calls (call history)", r"RedisStreamAuditSink\.record|Redis\.execute_command"),
    ("bearer key lookup (KeyCache / KeyStore)", r"KeyCache\.resolve|KeyStore\.resolve"),
    ("ledger durability guard", r"LedgerGuard\."),
    ("executor: validation, proposal, envelope, audit event", r"AgentPath\.|Invoker\.|args_hash"),
    ("receipt and tool result (surface / bare handler)", r"McpSurface\.|card_for_agent|call_tool \(bench"),
    ("SDK result serialization", r"serialize_server_result|ServerRunner\._serialize"),
    ("SDK dispatch (serve_one, runner, middleware)", r"serve_one|ServerRunner"),
    ("SDK 2026-07-28 HTTP entry", r"handle_modern_request|_to_jsonrpc_response"),
    ("other (uvicorn, Starlette, event loop, I/O callbacks)", r"."),
)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python bench/profile_write_path.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=15, help="sampled seconds per variant (default 15)")
    parser.add_argument("--concurrency", type=int, default=8, help="closed-loop workers (default 8)")
    parser.add_argument("--out", type=Path, default=None, help="directory for the collapsed stacks (default: temp)")
    return parser.parse_args(argv)


def record(stack: Stack, variant: str, seconds: int, concurrency: int, out: Path, cores: frozenset[int]) -> float:
    """Sample one variant under load; returns its measured CPU microseconds per proposal."""
    process = PROCESS[variant]
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    command = [spy, "record", "-p", str(stack.servers[process].pid), "-d", str(seconds), "-r", str(SAMPLE_RATE_HZ)]
    command += ["--nonblocking", "-f", "raw", "-o", str(out / f"{variant}.txt")]
    stack.ask(propose_command(stack, process, TOOLS[variant], concurrency, warmup=0.0, duration=2.0), 60)
    pin = ["taskset", "-c", ",".join(map(str, sorted(cores)))] if cores and shutil.which("taskset") else []
    sampler = subprocess.Popen([*pin, *command], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        window = {"warmup": 0.5, "duration": float(seconds)}
        result = stack.ask(propose_command(stack, process, TOOLS[variant], concurrency, **window), seconds + 60)
        _, errors = sampler.communicate(timeout=seconds + 30)
    finally:
        if sampler.poll() is None:
            sampler.kill()
            sampler.wait()
    if sampler.returncode != 0:
        raise RuntimeError(f"py-spy failed: {errors.strip()[-500:]}")
    return float(result["server_cpu_us_per_call"])


def report(cpu: dict[str, float], out: Path, concurrency: int) -> None:
    print(f"\nRevision {git_revision()}")
    print(f"Server CPU per proposal by bucket at c={concurrency} (µs; share of samples x measured CPU per call)")
    print(f"{'bucket':<56} {'gateway':>8} {'bare+GET':>8} {'bare':>8} {'gw-b+G':>8}")
    shares = {variant: buckets(out / f"{variant}.txt", BUCKETS) for variant in VARIANTS}
    for label, _ in BUCKETS:
        values = [shares[v][0][label] / max(shares[v][1], 1) * cpu[v] for v in VARIANTS]
        print(f"{label:<56} {values[0]:8.0f} {values[1]:8.0f} {values[2]:8.0f} {values[0] - values[1]:8.0f}")
    total = [cpu[v] for v in VARIANTS]
    print(f"{'total (measured)':<56} {total[0]:8.0f} {total[1]:8.0f} {total[2]:8.0f} {total[0] - total[1]:8.0f}")
    print(f"\nCollapsed stacks: {', '.join(str(out / f'{v}.txt') for v in VARIANTS)}")


def main(argv: Sequence[str] | None = None) -> int:
    options = parse(argv)
    args = write_args([])
    pinning = Pinning.choose(None, None)
    pin_self(pinning.others)
    out = options.out or Path(tempfile.mkdtemp(prefix="bench-profile-write-"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-profile-write-logs-") as log_dir:
        with started_stack(args, pinning, Path(log_dir)) as stack:
            orders = ["--orders-url", stack.backends.ready["orders"]]
            stack.start_server("gateway", "gateway", DATABASES["gateway"], *orders, "--no-worker")
            stack.start_server("bare", "bare-write", DATABASES["bare"])
            verify(stack)
            cpu = {v: record(stack, v, options.seconds, options.concurrency, out, pinning.others) for v in VARIANTS}
    report(cpu, out, options.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main())
