"""Instructions per call, gateway against bare SDK server: counted by callgrind, not timed.

CPU time on these shared 2-core machines moves with the host: within minutes of one session the bare
server's CPU per proposal went from 1,350 to 2,000 µs with nothing else running, and the same
revision's read ratio at c=32 was 0.99 on one machine and 0.75 on another. An instruction count
does not move: callgrind counts what the process executes, whatever the machine does meanwhile.
It says nothing about cache misses or stalls (the reason one machine differs from another), so it
complements `read_path.py` and `write_path.py`; it does not replace their verdicts.

What it does: Redis, the backends and an agent key as `read_path.py` starts them; then each server
in turn under ``valgrind --tool=callgrind --instr-atstart=no``. After `--warmup` uninstrumented calls
it turns instrumentation on (``callgrind_control -i on``), zeroes the counters, sends exactly
`--calls` calls at each `--concurrency` level from this process, dumps the counters, and turns
instrumentation off. A server's count includes whatever else it did in the window (its event loop,
the gateway's background loops); under callgrind a call takes about 50 times longer, so that idle
work would weigh 50 times more than at full speed. The script therefore also counts each server's
instructions over `--idle` seconds without calls and subtracts that rate times the window: the
figures are instructions per call, idle work subtracted (the raw ones are printed too).

    .venv/bin/python bench/instructions.py                    # reads and proposals, about 6 minutes
    .venv/bin/python bench/instructions.py --path read --calls 200

Servers: reads, ``gateway`` (without its worker: its sweeps are the clock's work, and under load they
fall behind the idle rate subtracted) against ``bare`` (tools/call rooms_availability); proposals, the gateway
without its worker against ``bare-write``'s ``rooms_book_checked`` (same Proposal, ledger script and
audit append, and the preview's two backend reads) and ``rooms_book`` (no reads), as `write_path.py`.
Needs valgrind (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._counted import Variant, send_calls, servers_in_turn  # noqa: E402
from bench._harness import Child  # noqa: E402
from bench.read_path import git_revision  # noqa: E402

STARTUP_TIMEOUT_SECONDS = 300.0
"""Start-up under valgrind, instrumentation off: the gateway's imports take tens of seconds."""
SLOWDOWN = 30.0
"""A call under valgrind takes about 50 times as long: the request timeout is stretched this much."""
_TOTALS = re.compile(rb"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", choices=("read", "write", "both"), default="both")
    parser.add_argument("--calls", type=int, default=300, help="counted calls per level (default 300)")
    parser.add_argument("--warmup", type=int, default=60, help="uninstrumented calls first (default 60)")
    parser.add_argument("--concurrency", default="1,8", help="comma-separated levels (default 1,8)")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds counted without calls (default 10)")
    parser.add_argument("--out", type=Path, default=None, help="keep the callgrind dumps here (callgrind_annotate)")
    args = parser.parse_args(argv)
    args.levels = [int(level) for level in args.concurrency.split(",") if level.strip()]
    if args.calls <= 0 or not args.levels or min(args.levels) <= 0:
        parser.error("calls and concurrency levels must be positive")
    return args


# --- callgrind ------------------------------------------------------------------------------------


def _control(pid: int, *flags: str) -> None:
    subprocess.run(["callgrind_control", *flags, str(pid)], check=True, capture_output=True, timeout=120)


def _dumped(out_dir: Path, pid: int, after: set[Path]) -> int:
    """Dump `pid`'s counters and return the instructions in the new dump file."""
    _control(pid, "--dump")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        new = [path for path in out_dir.glob(f"{pid}.out*") if path not in after and path.stat().st_size]
        for path in new:
            match = _TOTALS.search(path.read_bytes())
            if match:
                after.add(path)
                return int(match.group(1))
        time.sleep(0.2)
    raise RuntimeError(f"callgrind wrote no dump for {pid}")


@contextlib.contextmanager
def counting(out_dir: Path, pid: int, seen: set[Path]) -> Iterator[Callable[[], int]]:
    """Instrumentation on and counters zeroed inside the block; the callable gives the count so far."""
    _control(pid, "--instr=on")
    _control(pid, "--zero")
    try:
        yield lambda: _dumped(out_dir, pid, seen)
    finally:
        _control(pid, "--instr=off")


def measure(
    child: Child, out_dir: Path, token: str, variant: Variant, args: argparse.Namespace, write: bool
) -> dict[str, Any]:
    url, pid, seen = f"{child.ready['url']}/mcp", child.pid, set[Path]()
    asyncio.run(send_calls(url, token, variant, args.warmup, 1, write=write, slowdown=SLOWDOWN))
    with counting(out_dir, pid, seen) as count:
        started = time.monotonic()
        time.sleep(args.idle)
        idle = count() / (time.monotonic() - started)
    levels = {}
    for concurrency in args.levels:
        with counting(out_dir, pid, seen) as count:
            started = time.monotonic()
            sent = send_calls(url, token, variant, args.calls, concurrency, write=write, slowdown=SLOWDOWN)
            failures = asyncio.run(sent)
            seconds = time.monotonic() - started
            total = count()
        if failures:
            raise RuntimeError(f"{variant.name} c={concurrency}: failed calls {dict(failures)}")
        levels[concurrency] = {
            "raw": total / args.calls,
            "net": (total - idle * seconds) / args.calls,
            "seconds": seconds,
        }
    return {"idle_per_s": idle, "levels": levels}


def run_path(write: bool, args: argparse.Namespace, logs: Path, out_dir: Path) -> dict[str, dict[str, Any]]:
    results = {}
    wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out_dir}/%p.out"]
    with servers_in_turn(write, logs, wrapper=wrapper, ready_timeout=STARTUP_TIMEOUT_SECONDS) as servers:
        for variant, child, token in servers:
            results[variant.name] = measure(child, out_dir, token, variant, args, write)
            print(f"  {variant.name:9} pid {child.pid:<7} {_line(results[variant.name])}", flush=True)
    return results


def _line(result: dict[str, Any]) -> str:
    levels = "  ".join(
        f"c={c}: {level['net'] / 1e6:,.2f} M ({level['raw'] / 1e6:,.2f} raw, {level['seconds']:.0f} s)"
        for c, level in result["levels"].items()
    )
    return f"idle {result['idle_per_s'] / 1e6:,.2f} M/s  {levels}"


def report(title: str, results: dict[str, dict[str, Any]], floors: Sequence[str], levels: Sequence[int]) -> None:
    print(f"{title}: million instructions per call, idle work subtracted (callgrind)")
    print(
        "  c | "
        + " ".join(f"{name:>9}" for name in results)
        + " | "
        + " ".join(f"gw/{f:<9}" for f in floors)
        + " | "
        + " ".join(f"gw-{f:<9}" for f in floors)
    )
    for c in levels:
        net = {name: result["levels"][c]["net"] for name, result in results.items()}
        row = " ".join(f"{value / 1e6:>9.2f}" for value in net.values())
        ratios = " ".join(f"{net['gateway'] / net[f]:>12.2f}" for f in floors)
        added = " ".join(f"{(net['gateway'] - net[f]) / 1e6:>10.2f} M" for f in floors)
        print(f"{c:>3} | {row} | {ratios} | {added}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("needs valgrind and callgrind_control on PATH", file=sys.stderr)
        return 2
    print(
        f"revision {git_revision()}; {args.calls} counted calls per level after {args.warmup} warm-up calls; "
        f"idle counted over {args.idle:g} s"
    )
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        logs, out_dir = Path(tmp), args.out or Path(tmp) / "callgrind"
        out_dir.mkdir(parents=True, exist_ok=True)
        for write in {"read": [False], "write": [True], "both": [False, True]}[args.path]:
            results = run_path(write, args, logs, out_dir)
            if write:
                report(
                    "proposals (tools/call rooms_book, new arguments each call)",
                    results,
                    ("bare+GET", "bare"),
                    args.levels,
                )
            else:
                report("reads (tools/call rooms_availability)", results, ("bare",), args.levels)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
