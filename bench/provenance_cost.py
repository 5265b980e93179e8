"""What remembering reads for card provenance adds to a read, beside the Redis writes a read already makes.

Every answered read appends one record to its principal's history (`gateway.store.call_history`:
``LPUSH``, ``LTRIM`` and ``PEXPIRE``, and for a read that showed third-party text ``PTTL`` and the
taint's ``SET PX``, in the read's audit append on a single node); a proposal reads it back once
(`recent`, one ``LRANGE``, beside the taint's ``GET``). The record here showed text, so every append
measured writes the taint too: the dearer case. This compares, on one throwaway Redis (AOF on,
``appendfsync everysec``) and one client connection pool, in the same run:

* ``set``: one ``SET``, the floor of a round trip;
* ``audit``: `RedisStreamAuditSink.record` of a read's ``tool.call`` event, the write every read
  already makes;
* ``history``: the provenance append;
* ``pipelined``: the same three commands as a redis-py pipeline, the alternative it was chosen over;
* ``recent``: the proposal's read of a full history (20 records);
* ``read-2``: what an answered read wrote until the history rode in the audit append: ``history``,
  then ``audit``, two round trips;
* ``read-1``: what it writes now on a single node, `RedisCallHistory.append_audited`: the history's
  three commands inside the audit append's script, one round trip.

Rounds are interleaved (each round runs every variant once), at concurrency 1 and 8; the table shows
the median of the rounds' wall time per operation and client CPU per operation, and the median of the
per-round ratios against ``audit`` and ``set``. The numbers move with whatever else the machine runs.

Run: ``python bench/provenance_cost.py [--rounds 7] [--ops 3000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis.asyncio as aioredis

from bench._harness import redis_server
from gateway.audit.events import AuditEvent
from gateway.provenance import CallRecord, HistoryRules, history_owner
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.call_history import RedisCallHistory, history_key

RULES = HistoryRules()
EVENT = AuditEvent(
    action="tool.call",
    outcome="ok",
    subject="alice@acme.example",
    org="acme",
    key_id="key_a",
    tool="rooms_availability",
    latency_ms=1.5,
)


async def _measure(op: Callable[[int], Awaitable[object]], ops: int, concurrency: int) -> tuple[float, float]:
    """Wall µs and client CPU µs per operation, `ops` operations over `concurrency` workers."""
    per_worker = ops // concurrency

    async def worker(index: int) -> None:
        for n in range(per_worker):
            await op(index * per_worker + n)

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    done = per_worker * concurrency
    return (time.perf_counter() - wall) / done * 1e6, (time.process_time() - cpu) / done * 1e6


async def _pipelined(client: aioredis.Redis, key: str, raw: str) -> None:
    async with client.pipeline(transaction=False) as pipe:
        pipe.lpush(key, raw)
        pipe.ltrim(key, 0, RULES.max_reads - 1)
        pipe.pexpire(key, int(RULES.window_seconds * 1000))
        await pipe.execute()


async def _two_trips(history: RedisCallHistory, audit: RedisStreamAuditSink, owner: str, record: CallRecord) -> bool:
    await history.append(owner, record, rules=RULES)
    return await audit.record(EVENT)


async def _run(url: str, rounds: int, ops: int, levels: Sequence[int]) -> None:
    client = aioredis.Redis.from_url(url)
    audit = RedisStreamAuditSink(client, secret=b"bench-secret")
    history = RedisCallHistory(client, audit=audit)
    owners = [history_owner("acme", f"agent-{i}@acme.example") for i in range(64)]
    record = CallRecord(tool="rooms_availability", at_ms=int(time.time() * 1000), untrusted_text=True, private=False)
    for owner in owners:  # full histories, so `recent` reads the bound
        for _ in range(RULES.max_reads):
            await history.append(owner, record, rules=RULES)
    variants: dict[str, Callable[[int], Awaitable[object]]] = {
        "set": lambda n: client.set(f"bench:set:{n % 64}", "x"),
        "audit": lambda n: audit.record(EVENT),
        "history": lambda n: history.append(owners[n % 64], record, rules=RULES),
        "pipelined": lambda n: _pipelined(client, history_key(owners[n % 64]), record.to_json()),
        "recent": lambda n: history.recent(owners[n % 64], rules=RULES),
        "read-2": lambda n: _two_trips(history, audit, owners[n % 64], record),
        "read-1": lambda n: history.append_audited(owners[n % 64], record, rules=RULES, event=EVENT),
    }
    for concurrency in levels:
        for op in variants.values():  # warm up
            await _measure(op, min(ops, 500), concurrency)
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        for _ in range(rounds):
            for name, op in variants.items():
                samples[name].append(await _measure(op, ops, concurrency))
        print(f"\nconcurrency {concurrency}: median of {rounds} interleaved rounds x {ops:,} ops")
        print(f"  {'variant':<8} {'wall µs/op':>11} {'CPU µs/op':>10} {'wall/audit':>11} {'wall/set':>9}")
        for name, values in samples.items():
            wall = statistics.median(v[0] for v in values)
            cpu = statistics.median(v[1] for v in values)
            vs_audit = statistics.median(v[0] / a[0] for v, a in zip(values, samples["audit"], strict=True))
            vs_set = statistics.median(v[0] / s[0] for v, s in zip(values, samples["set"], strict=True))
            print(f"  {name:<8} {wall:>11.1f} {cpu:>10.1f} {vs_audit:>11.2f} {vs_set:>9.2f}")
    await client.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ops", type=int, default=3000)
    parser.add_argument("--concurrency", default="1,8")
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    with (
        tempfile.TemporaryDirectory(prefix="bench-provenance-") as logs,
        redis_server(frozenset(), Path(logs)) as (
            _,
            url,
        ),
    ):
        asyncio.run(_run(url, args.rounds, args.ops, levels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
