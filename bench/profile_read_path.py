"""Where the gateway spends its extra CPU: py-spy samples of both servers under the same load.

Starts the stack of `bench.read_path` (same pinning, backends, Redis, load generator), then for each
server runs the closed-loop load at one concurrency level while ``py-spy record`` samples the server
process from the other core. It writes the raw collapsed stacks (``<server>.txt``, loadable into any
flame-graph viewer) and prints CPU microseconds per call by bucket: the share of samples whose stack
contains a bucket's frames, times the measured CPU per call. Buckets are matched in order; the first
match wins. Attribution is approximate: the sampler is statistical, and coroutines resumed from
callbacks or run as separate tasks (``asyncio.wait_for``, anyio task groups) appear under their own
task's root, so part of their cost lands in "other".

Needs py-spy (``pip install py-spy``) and ptrace rights over the server processes.
Run: ``python bench/profile_read_path.py [--seconds 20] [--concurrency 8] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._harness import Pinning, pin_self  # noqa: E402
from bench.read_path import SERVERS, Stack, git_revision, measure, parse_args, started_stack, verify  # noqa: E402

SAMPLE_RATE_HZ = 250

BUCKETS: tuple[tuple[str, str], ...] = (
    ("SDK runs tools/list inside tools/call (Mcp-Param check)", r"_tool_input_schema"),
    ("bearer key lookup (KeyStore.resolve)", r"KeyStore\.resolve"),
    ("audit XADD", r"RedisStreamAuditSink\.record|Redis\.execute_command"),
    ("backend GET (aiohttp in both servers)", r"request_json|ClientSession\._request|AiohttpUpstream"),
    ("executor: validation, withholding, views, envelope", r"AgentPath\.|Invoker\.|withhold_untrusted"),
    ("tool result building (surface / bare handler)", r"McpSurface\.|call_tool \(bench"),
    ("SDK result serialization", r"serialize_server_result|ServerRunner\._serialize"),
    ("SDK dispatch (serve_one, runner, middleware)", r"serve_one|ServerRunner"),
    ("SDK 2026-07-28 HTTP entry", r"handle_modern_request|_to_jsonrpc_response"),
    ("other (uvicorn, Starlette, event loop, I/O callbacks)", r"."),
)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python bench/profile_read_path.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=20, help="sampled seconds per server (default 20)")
    parser.add_argument("--concurrency", type=int, default=8, help="closed-loop workers (default 8)")
    parser.add_argument("--out", type=Path, default=None, help="directory for the collapsed stacks (default: temp)")
    return parser.parse_args(argv)


def record(stack: Stack, server: str, seconds: int, concurrency: int, out: Path, cores: frozenset[int]) -> float:
    """Sample `server` under load; returns its measured CPU microseconds per call."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    command = [spy, "record", "-p", str(stack.servers[server].pid), "-d", str(seconds), "-r", str(SAMPLE_RATE_HZ)]
    command += ["--nonblocking", "-f", "raw", "-o", str(out / f"{server}.txt")]
    measure(stack, server, "modern", concurrency, 0.0, 2.0)  # warm-up
    pin = ["taskset", "-c", ",".join(map(str, sorted(cores)))] if cores and shutil.which("taskset") else []
    sampler = subprocess.Popen([*pin, *command], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        result = measure(stack, server, "modern", concurrency, 0.5, float(seconds))
        _, errors = sampler.communicate(timeout=seconds + 30)
    finally:
        if sampler.poll() is None:
            sampler.kill()
            sampler.wait()
    if sampler.returncode != 0:
        raise RuntimeError(f"py-spy failed: {errors.strip()[-500:]}")
    return float(result["server_cpu_us_per_call"])


def buckets(path: Path, table: Sequence[tuple[str, str]] = BUCKETS) -> tuple[Counter[str], int]:
    """Samples per bucket of `table` (label, pattern; first match wins), and the total, from a py-spy raw file."""
    counts: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, number = line.rpartition(" ")
        if not number.isdigit():
            continue
        total += int(number)
        label = next((label for label, pattern in table if re.search(pattern, stack)), table[-1][0])
        counts[label] += int(number)
    return counts, total


def report(cpu: dict[str, float], out: Path, concurrency: int) -> None:
    print(f"\nRevision {git_revision()}")
    print(f"Server CPU per call by bucket at c={concurrency} (µs; share of samples x measured CPU per call)")
    print(f"{'bucket':<66} {'gateway':>8} {'bare':>8} {'added':>8}")
    shares = {server: buckets(out / f"{server}.txt") for server in SERVERS}
    for label, _ in BUCKETS:
        values = [shares[s][0][label] / max(shares[s][1], 1) * cpu[s] for s in SERVERS]
        print(f"{label:<66} {values[0]:8.0f} {values[1]:8.0f} {values[0] - values[1]:8.0f}")
    print(f"{'total (measured)':<66} {cpu['gateway']:8.0f} {cpu['bare']:8.0f} {cpu['gateway'] - cpu['bare']:8.0f}")
    print(f"\nCollapsed stacks: {out}/gateway.txt, {out}/bare.txt")


def main(argv: Sequence[str] | None = None) -> int:
    options = parse(argv)
    args = parse_args([])
    pinning = Pinning.choose(None, None)
    pin_self(pinning.others)
    out = options.out or Path(tempfile.mkdtemp(prefix="bench-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-profile-logs-") as log_dir:
        with started_stack(args, pinning, Path(log_dir)) as stack:
            verify(stack, ["modern"])
            cpu = {s: record(stack, s, options.seconds, options.concurrency, out, pinning.others) for s in SERVERS}
    report(cpu, out, options.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main())
