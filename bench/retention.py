"""What card retention gives back and what it costs: Redis memory before and after a sweep, and its speed.

Files `--cards` cards through the real `RedisLedger.propose` (card_bytes.py's proposals), brings
`--succeed` of them to SUCCEEDED (approve, claim, dispatch, complete) and rejects the rest, leaves
`--open` more PENDING, waits out a short retention, and runs one `RedisCardRetention.sweep` (its
per-sweep cap lifted to every card) into a temporary archive. Printed: ``INFO used_memory`` before
filing, before the sweep and after it (which includes the audit stream, one entry more per retired
card), the ledger's own keys before and after (``MEMORY USAGE`` of every shard key: the bytes
returned per finished card), the sweep's wall time and this process's CPU for it, against the same
for filing and finishing the cards in the same run (the baseline: what the cards cost to make), and
the archive's bytes per card. Every PENDING card must still be in Redis afterwards and every
finished one in the archive, or the run fails.

    .venv/bin/python bench/retention.py                    # about 30 s
    .venv/bin/python bench/retention.py --cards 20000 --succeed 2000
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis.asyncio as aioredis  # noqa: E402

from bench._harness import redis_server  # noqa: E402
from bench.card_bytes import proposal, run_to_success  # noqa: E402
from gateway.archives.card_archive import CardArchive  # noqa: E402
from gateway.limits.budgets import Limits  # noqa: E402
from gateway.store.audit_stream import RedisStreamAuditSink  # noqa: E402
from gateway.store.ledger.redis_ledger import RedisLedger  # noqa: E402
from gateway.store.ledger.retention import RedisCardRetention  # noqa: E402

KEEP_MS = 1_000


async def _used(client: aioredis.Redis) -> int:
    info: Any = await client.info("memory")
    return int(info["used_memory"])


async def _ledger_bytes(client: aioredis.Redis) -> int:
    """MEMORY USAGE of every key of the ledger's shards (cards, indexes, timers, dedupe, outbox)."""
    total = 0
    async for key in client.scan_iter(match="cs:{cs*", count=1000):
        total += int(await client.memory_usage(key, samples=0) or 0)
    return total


async def measure(url: str, cards: int, succeed: int, still_open: int, archive_dir: Path) -> dict[str, Any]:
    client = aioredis.Redis.from_url(url)
    ledger = RedisLedger(client, limits=Limits(open_cards_per_requester=10**9))
    audit = RedisStreamAuditSink(client, secret=secrets.token_bytes(32), stream="bench:retention-audit")
    empty = await _used(client)
    wall, cpu = time.perf_counter(), time.process_time()
    ids: list[str] = []
    for start in range(0, cards + still_open, 64):
        batch = [ledger.propose(proposal(n)) for n in range(start, min(start + 64, cards + still_open))]
        for created in await asyncio.gather(*batch):
            assert created.card is not None, created.status
            ids.append(created.card.card_id)
    finished, pending = ids[:cards], ids[cards:]
    for card_id in finished[:succeed]:
        await run_to_success(ledger, card_id)
    for card_id in finished[succeed:]:
        assert (await ledger.reject(card_id, admin="admin@acme.example", reason="bench")).ok
    await ledger.ensure_outbox_group()  # the worker's acks, as card_bytes.py does them
    while entries := await ledger.read_outbox("bench", block_ms=0, count=1000):
        for entry in entries:
            await ledger.ack(entry)
    made = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
    await asyncio.sleep(KEEP_MS / 1000 + 0.2)
    before, ledger_before = await _used(client), await _ledger_bytes(client)
    # One sweep, every card (per_sweep=cards): its speed is what is measured.
    retention = RedisCardRetention(
        client, CardArchive(archive_dir), keep_ms=KEEP_MS, audit=audit, batch=500, per_sweep=cards
    )
    wall, cpu = time.perf_counter(), time.process_time()
    retired = await retention.sweep()
    swept = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
    after, ledger_after = await _used(client), await _ledger_bytes(client)
    archive = CardArchive(archive_dir)
    kept = [await ledger.get(card_id) for card_id in pending]
    left = sum(card is not None for card in kept)
    if retired != cards or left != len(pending):
        raise SystemExit(f"retired {retired} of {cards} finished cards; PENDING left: {left} of {len(pending)}")
    archived = {record["card_id"] for record in archive.records()}
    if not set(finished) <= archived:
        raise SystemExit("a retired card is missing from the archive")
    archive_bytes = sum(path.stat().st_size for path in archive.files())
    await client.aclose()
    return {
        "cards": cards,
        "succeed": succeed,
        "open": still_open,
        "empty": empty,
        "before": before,
        "after": after,
        "ledger_before": ledger_before,
        "ledger_after": ledger_after,
        "made": made,
        "swept": swept,
        "archive_bytes": archive_bytes,
    }


def report(r: dict[str, Any]) -> None:
    cards = r["cards"]
    print(
        f"Card retention: {cards:,} finished cards ({r['succeed']:,} SUCCEEDED, the rest REJECTED), "
        f"{r['open']:,} PENDING left alone"
    )
    print(
        f"  used_memory: empty {r['empty'] / 2**20:,.1f} MiB, before the sweep {r['before'] / 2**20:,.1f} MiB, "
        f"after {r['after'] / 2**20:,.1f} MiB"
    )
    returned = (r["ledger_before"] - r["ledger_after"]) / cards
    print(
        f"  the ledger's keys (MEMORY USAGE of every cs:{{cs*}} key): {r['ledger_before'] / 2**20:,.2f} MiB before, "
        f"{r['ledger_after'] / 2**20:,.2f} MiB after (the PENDING cards and the shards' own structures): "
        f"{returned:,.0f} B returned per finished card"
    )
    made, swept = r["made"], r["swept"]
    wall, cpu = swept["wall"] / made["wall"], swept["cpu"] / made["cpu"]
    print(
        f"  sweep: {swept['wall']:.2f} s wall ({cards / swept['wall']:,.0f} cards/s), {swept['cpu']:.2f} s CPU here; "
        f"filing and finishing them took {made['wall']:.2f} s wall, {made['cpu']:.2f} s CPU "
        f"(sweep / making: {wall:.2f}x wall, {cpu:.2f}x CPU)"
    )
    print(f"  archive: {r['archive_bytes'] / cards:,.0f} B a card on disk (JSON lines, history included)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cards", type=int, default=5000)
    parser.add_argument("--succeed", type=int, default=1000)
    parser.add_argument("--open", type=int, default=500)
    parser.add_argument("--appendfsync", default="always", choices=("always", "everysec"))
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as logs,
        tempfile.TemporaryDirectory() as archive_dir,
        redis_server(frozenset(), Path(logs), appendfsync=args.appendfsync) as (_child, url),
    ):
        report(asyncio.run(measure(url, args.cards, args.succeed, args.open, Path(archive_dir))))


if __name__ == "__main__":
    main()
