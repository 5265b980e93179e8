"""Python calls per call, gateway against bare SDK server: counted by cProfile, not timed or sampled.

py-spy samples where the time goes, and `instructions.py` counts what each call costs in all; neither
says which of the gateway's functions a call runs that the bare server's does not. A call count
does, and its figures hardly depend on the machine or its load: the profiler slows a call down, which
changes what it costs, not what it runs. What moves is what depends on timing: how many calls share an
audit batch at c > 1, and how much background work falls in the window.

What it does: Redis, the backends and an agent key as `instructions.py` starts them; then each server
in turn with a profiling hook (`bench._servers.PROFILE_DIR_ENV`). After `--warmup` calls it sends the
server SIGUSR1 (cProfile on, main thread), exactly `--calls` calls at `--concurrency`, then SIGUSR2
(cProfile off, stats written), and reads the stats back. A server's count holds whatever else its
event loop ran in the window (the gateway's background loops too), so counts slightly above a whole
number are that work's share.

    .venv/bin/python bench/call_counts.py                       # reads, then proposals, about 1 minute
    .venv/bin/python bench/call_counts.py --path read --top 40 --concurrency 1

Printed per path: calls per call in all; by package (ours by module), with each server's calls per
call and the difference against the first other server; the functions with the most calls per call
more than that server's (C functions, ``builtins``, included). Self times are left out: cProfile's own
cost per call is of the size of a small function's, so its times say more about call counts than CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._counted import send_calls, servers_in_turn  # noqa: E402
from bench._harness import ROOT  # noqa: E402
from bench._servers import PROFILE_DIR_ENV  # noqa: E402
from bench.read_path import git_revision  # noqa: E402

SLOWDOWN = 5.0
"""A profiled call takes a few times as long: the request timeout is stretched this much."""
_PACKAGE = re.compile(r"site-packages/([^/]+)")
_STDLIB = re.compile(r"python3\.\d+/([^/]+)")
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", choices=("read", "write", "both"), default="both")
    parser.add_argument("--calls", type=int, default=300, help="counted calls (default 300)")
    parser.add_argument("--warmup", type=int, default=100, help="calls before counting (default 100)")
    parser.add_argument("--concurrency", type=int, default=8, help="calls at a time (default 8)")
    parser.add_argument("--top", type=int, default=25, help="rows per table (default 25)")
    args = parser.parse_args(argv)
    if args.calls <= 0 or args.concurrency <= 0:
        parser.error("calls and concurrency must be positive")
    return args


def where(path: str) -> str:
    """The group a profiled function is counted in: a package, a standard module, or a module of ours."""
    if path == "~":
        return "builtins (C functions)"
    if (match := _PACKAGE.search(path)) is not None:
        return match.group(1)
    if path.startswith(str(ROOT)):
        return Path(path).relative_to(ROOT).as_posix()
    if (match := _STDLIB.search(path)) is not None:
        return f"stdlib {match.group(1)}"
    return path


def function_label(path: str, line: int, name: str) -> str:
    return f"{where(path)}:{line} {name}" if path != "~" else name


def counted(stats_file: Path) -> Counter[tuple[str, int, str]]:
    """Calls of each function (file, line, name) in one dumped profile. A C method's name loses the
    address of its type (``__new__ of type object at 0x...``), which differs from process to process."""
    stats: dict[Any, Any] = pstats.Stats(str(stats_file)).stats  # type: ignore[attr-defined]
    calls: Counter[tuple[str, int, str]] = Counter()
    for (path, line, name), value in stats.items():
        calls[path, line, _ADDRESS.sub("", name)] += value[1]
    return calls


def profiled(pid: int, out_dir: Path, calls: Coroutine[Any, Any, Counter[str]]) -> Counter[tuple[str, int, str]]:
    """The functions the server `pid` runs for `calls` (sent between SIGUSR1 and SIGUSR2), with their calls."""
    before = set(out_dir.glob(f"{pid}.*.prof"))
    os.kill(pid, signal.SIGUSR1)
    time.sleep(0.2)  # the handler runs between two bytecodes of the server's main thread
    failures = asyncio.run(calls)
    os.kill(pid, signal.SIGUSR2)
    if failures:
        raise RuntimeError(f"failed calls {dict(failures)}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        new = set(out_dir.glob(f"{pid}.*.prof")) - before
        if new:
            return counted(new.pop())
        time.sleep(0.1)
    raise RuntimeError(f"server {pid} wrote no profile")


def run_path(write: bool, args: argparse.Namespace, logs: Path) -> dict[str, Counter[tuple[str, int, str]]]:
    results = {}
    out_dir = logs / "profiles"
    out_dir.mkdir(parents=True)
    with servers_in_turn(write, logs, env={PROFILE_DIR_ENV: str(out_dir)}) as servers:
        for variant, child, token in servers:
            url = f"{child.ready['url']}/mcp"
            asyncio.run(send_calls(url, token, variant, args.warmup, 1, write=write, slowdown=SLOWDOWN))
            calls = send_calls(url, token, variant, args.calls, args.concurrency, write=write, slowdown=SLOWDOWN)
            results[variant.name] = profiled(child.pid, out_dir, calls)
    return results


def report(title: str, results: dict[str, Counter[tuple[str, int, str]]], calls: int, top: int) -> None:
    names = list(results)
    floor = names[1]
    print(f"{title}: Python calls per call (cProfile), {calls} calls")
    print("  in all: " + ", ".join(f"{name} {sum(c.values()) / calls:,.0f}" for name, c in results.items()))
    groups = {name: Counter[str]() for name in names}
    for name, counts in results.items():
        for (path, _line, _function), n in counts.items():
            groups[name][where(path)] += n
    keys = set().union(*(g.keys() for g in groups.values()))
    ranked = sorted(keys, key=lambda k: -abs(groups["gateway"][k] - groups[floor][k]))[:top]
    print(f"  {'by package or module':44} " + " ".join(f"{n:>9}" for n in names) + f"   gw-{floor}")
    for key in ranked:
        cells = " ".join(f"{groups[n][key] / calls:>9.1f}" for n in names)
        print(f"  {key[:44]:44} {cells}   {(groups['gateway'][key] - groups[floor][key]) / calls:>+7.1f}")
    extra = Counter({key: n - results[floor][key] for key, n in results["gateway"].items()})
    print(f"  functions the gateway calls most more often than {floor} (per call: gateway, gw-{floor})")
    for function, n in extra.most_common(top):
        print(f"  {results['gateway'][function] / calls:>9.1f} {n / calls:>+7.1f}  {function_label(*function)}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"revision {git_revision()}; {args.calls} calls at c={args.concurrency} after {args.warmup} warm-up calls")
    with tempfile.TemporaryDirectory(prefix="bench-call-counts-") as tmp:
        for write in {"read": [False], "write": [True], "both": [False, True]}[args.path]:
            results = run_path(write, args, Path(tmp) / ("write" if write else "read"))
            title = "proposals (tools/call rooms_book)" if write else "reads (tools/call rooms_availability)"
            report(title, results, args.calls, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
