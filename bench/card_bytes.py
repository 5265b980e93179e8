"""Redis bytes per card, key by key, and per audit entry: what the size targets of issue 15 measure.

Files `--cards` cards through the real `RedisLedger.propose` (arguments, hashes and ids the size of
the write bench's, one requester as in that bench), runs `--succeed` of them to SUCCEEDED (approve,
claim, dispatch, complete), and asks ``MEMORY USAGE key SAMPLES 0`` of every key a card has a part
in: its own key, and the shard structures it is an entry of (outbox stream, dedupe hash, shard
index, timers, open-card set and counts, the org's and the requester's indexes), each divided by
its entries (the counts by the cards they count, the set of orgs by the cards of those orgs).
Then it appends `--audit` entries like a proposal's to an audit stream and divides its size by them
(and as many as the executor writes them, with the card's ``existing`` and ``state``, to another).
Net = own key + the entries a card in that state has - its canonical arguments.

    .venv/bin/python bench/card_bytes.py                 # about 20 s
    .venv/bin/python bench/card_bytes.py --cards 20000 --succeed 2000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis.asyncio as aioredis  # noqa: E402

from bench._harness import redis_server  # noqa: E402
from gateway.audit.events import AuditEvent  # noqa: E402
from gateway.canonical import canonical_json  # noqa: E402
from gateway.cards.card import CardState  # noqa: E402
from gateway.cards.contract import Proposal  # noqa: E402
from gateway.limits.budgets import Limits  # noqa: E402
from gateway.store.audit_stream import RedisStreamAuditSink  # noqa: E402
from gateway.store.ledger.layout import SHARDS, card_keys, open_buckets, org_index, orgs_key, requester_index  # noqa: E402
from gateway.store.ledger.redis_ledger import RedisLedger, card_shard  # noqa: E402

SUBJECT, ORG = "bench@acme.example", "acme"
PENDING_TARGET, SUCCEEDED_TARGET, AUDIT_TARGET = 512, 1024, 150
STRUCTURES = ("outbox", "open", "index", "timers", "open_cards", "repeats", "open_count", "org", "by", "orgs")
OPEN_ONLY = {"open", "timers", "open_cards", "open_count"}
"""Structures a card is an entry of only while it is open (the others keep it for good)."""


def proposal(n: int) -> Proposal:
    start = f"{n // 60 % 24:02d}:{n % 60:02d}"
    arguments = {
        "date": "2031-01-06",
        "end": "10:00",
        "room_id": "room-atlas",
        "start": start,
        "title": "Bench booking",
        "n": n,
    }
    return Proposal(
        tool="rooms_book",
        tool_version="2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881",
        arguments=arguments,
        args_hash=f"{n:064x}",
        requester_subject=SUBJECT,
        requester_org=ORG,
        requester_key_id="key_0123456789ab",
        requester_roles=frozenset({"staff"}),
        approvals_required=1,
        approver_role="approver",
        summary=f"Book room-atlas on 2031-01-06 from {arguments['start']} to 10:00",
        agent_text={"title": "Bench booking"},
        decide_within_ms=86_400_000,
        execute_within_ms=3_600_000,
        dedupe_key=f"{ORG}|{SUBJECT}|rooms_book|{n}",
    )


def structure_keys(shard: int) -> dict[str, str]:
    keys = card_keys(f"crd_{shard}_{'0' * 32}", shard)
    return dict(zip(STRUCTURES[:7], keys[1:], strict=True)) | {
        "org": org_index(shard, ORG),
        "by": requester_index(shard, ORG, SUBJECT),
        "orgs": orgs_key(shard),
    }


async def entries_and_bytes(client: aioredis.Redis) -> dict[str, tuple[int, int]]:
    """Per structure over all shards: (entries, MEMORY USAGE bytes)."""
    totals = {name: [0, 0] for name in STRUCTURES}
    for shard in range(SHARDS):
        named = [(name, key) for name, key in structure_keys(shard).items() if name != "open"]
        buckets = [("open", key) for key in open_buckets(shard)]  # the dedupe buckets and the hash written before
        for name, key in buckets + named:
            stored_type = await client.type(key)
            kind = stored_type.decode() if isinstance(stored_type, bytes) else stored_type
            count = {"zset": client.zcard, "hash": client.hlen, "stream": client.xlen, "set": client.scard}.get(kind)
            if count is None:
                continue
            if name == "open_count":  # one field per requester: its entries are the cards it counts
                totals[name][0] += sum(int(value) for value in await client.hvals(key))
            else:
                totals[name][0] += int(await count(key))
            totals[name][1] += int(await client.memory_usage(key, samples=0) or 0)
    totals["orgs"][0] = totals["org"][0]  # one member per org: its share is per card of those orgs
    return {name: (entries, size) for name, (entries, size) in totals.items()}


async def run_to_success(ledger: RedisLedger, card_id: str) -> None:
    card = await ledger.get(card_id)
    assert card is not None
    await ledger.approve(
        card_id, approver="admin@acme.example", version=card.version, args_hash=card.args_hash, comment=""
    )
    claimed = await ledger.claim(card_id, worker="worker-1a2b3c", lease_ms=30_000)
    assert claimed.card is not None
    await ledger.dispatch(card_id, fence=claimed.card.fence)
    done = await ledger.complete(
        card_id,
        fence=claimed.card.fence,
        outcome=CardState.SUCCEEDED,
        reference="bk_0123456789abcdef",
        evidence={"status": 201},
        settle_ms=1_000,
    )
    assert done.status == "OK", done.status


async def measure(url: str, cards: int, succeed: int, audit: int) -> dict[str, Any]:
    client = aioredis.Redis.from_url(url)
    ledger = RedisLedger(client, limits=Limits(open_cards_per_requester=10**9))
    ids: list[str] = []
    for start in range(0, cards, 64):
        batch = [ledger.propose(proposal(n)) for n in range(start, min(start + 64, cards))]
        for created in await asyncio.gather(*batch):
            assert created.card is not None, created.status
            ids.append(created.card.card_id)
    for card_id in ids[:succeed]:
        await run_to_success(ledger, card_id)
    # The outbox entry of an approved card is removed once a worker acks it: the bench acks them all.
    await ledger.ensure_outbox_group()
    while entries := await ledger.read_outbox("bench", block_ms=0, count=1000):
        for entry in entries:
            await ledger.ack(entry)
    structures = entries_and_bytes(client)
    per_entry = {name: size / entries for name, (entries, size) in (await structures).items() if entries}
    rows = {}
    for state, chosen in (("PENDING", ids[succeed:]), ("SUCCEEDED", ids[:succeed])):
        own = []
        for card_id in chosen[:1000]:
            shard = card_shard(card_id)
            assert shard is not None
            size = int(await client.memory_usage(card_keys(card_id, shard)[0], samples=0) or 0)
            card = await ledger.get(card_id)
            assert card is not None and card.state.value == state
            own.append(size - len(canonical_json(card.arguments).encode()))
        parts = {name: per_entry.get(name, 0.0) for name in STRUCTURES if state == "PENDING" or name not in OPEN_ONLY}
        rows[state] = {
            "own": statistics.median(own),
            "max_own": max(own),
            "parts": parts,
            "net": max(own) + sum(parts.values()),
        }
    audit_bytes = {}
    # The typical entry (its card id), and the executor's own proposal entry, which also says
    # whether the card existed and its state (`gateway.executor.agent`, without provenance).
    for name, more in (("audit", {}), ("audit_full", {"existing": "false", "state": "PENDING"})):
        stream = f"bench:{name}"
        sink = RedisStreamAuditSink(client, secret=b"bench-secret-0123456789abcdef0123", stream=stream)
        for n in range(audit):
            await sink.record(
                AuditEvent(
                    action="card.propose",
                    outcome="ok",
                    subject=SUBJECT,
                    org=ORG,
                    key_id="key_0123456789ab",
                    tool="rooms_book",
                    latency_ms=1.234,
                    extra={"card_id": ids[n % len(ids)], **more},
                )
            )
        audit_bytes[name] = int(await client.memory_usage(stream, samples=0) or 0) / max(audit, 1)
    await client.aclose()
    return {"rows": rows, **audit_bytes, "cards": cards, "succeed": succeed}


def report(result: dict[str, Any]) -> None:
    print(
        f"Redis bytes per card (MEMORY USAGE ... SAMPLES 0), {result['cards']:,} cards, {result['succeed']:,} SUCCEEDED"
    )
    print(
        "  state     | own key - args (median / max) | "
        + " ".join(f"{name:>10}" for name in STRUCTURES)
        + " |  net max"
    )
    for state, row in result["rows"].items():
        parts = " ".join(
            f"{row['parts'][name]:>10.0f}" if name in row["parts"] else f"{'-':>10}" for name in STRUCTURES
        )
        print(f"  {state:9} | {row['own']:>15,.0f} / {row['max_own']:>6,} | {parts} | {row['net']:>8,.0f}")
    print(
        f"  audit entry: {result['audit']:,.0f} B (stream MEMORY USAGE / entries); with the executor's "
        f"existing and state: {result['audit_full']:,.0f} B"
    )
    print("Targets")
    checks = [
        ("Redis bytes per card beyond args, PENDING", result["rows"]["PENDING"]["net"], PENDING_TARGET),
        ("Redis bytes per card beyond args, SUCCEEDED", result["rows"]["SUCCEEDED"]["net"], SUCCEEDED_TARGET),
        ("Redis bytes per audit entry", result["audit"], AUDIT_TARGET),
    ]
    for label, value, target in checks:
        print(f"  {label:46} {value:>8,.0f} B   target <= {target:>5} B   {'PASS' if value <= target else 'MISS'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cards", type=int, default=5000)
    parser.add_argument("--succeed", type=int, default=1000)
    parser.add_argument("--audit", type=int, default=2000)
    parser.add_argument("--appendfsync", default="always", choices=("always", "everysec"))
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as logs,
        redis_server(frozenset(), Path(logs), appendfsync=args.appendfsync) as (
            _child,
            url,
        ),
    ):
        report(asyncio.run(measure(url, args.cards, args.succeed, args.audit)))


if __name__ == "__main__":
    main()
