"""Card retention: finished cards past their retention leave Redis for the card archive.

Without it every card stays in Redis for good, with its entries in its org's and its requester's
indexes (about 1.3 KB a finished card, bench/retention.py): memory grows with every write ever
proposed. `RedisCardRetention.sweep` bounds that: a card in a `TERMINAL` state whose last event
is older than `keep_ms` is written to the archive (`gateway.archives.card_archive`), fsynced, and only then
removed from Redis by `RETIRE`, one atomic script per card that checks, on the card as it is then:

* it is the version that was archived (a card that changed since, by a late worker result, is
  archived again at the next sweep instead);
* its state is terminal: a card a person or a worker may still act on (PENDING, APPROVED, EXECUTING,
  UNKNOWN, NEEDS_RECONCILIATION) is never removed, however old;
* its last event is at least `keep_ms` old, by the Redis server's clock;
* no dedupe entry still answers from it: a SUCCEEDED card inside its repeat window stays (an
  entry whose window has lapsed is removed with the card).

A removed card leaves every structure of its shard (the card key, the org's, the requester's and the
shard's indexes, timers, the open-card set), is audited as ``card.archive`` and counted as the
``retire`` transition. The audit event names the archive file and the card's version and chain head
(its last event's hash): the card's own chain is unkeyed, so it is the keyed audit trail that binds
the archived copy, and a copy whose history was rewritten, chain and all, no longer matches it.
Listings and reads no longer find a removed card; `CardArchive.find` does
(``countersign cards archived``). Which cards are looked at: per shard, each org index's (and the
shard's older index's) cards created before the cutoff, a batch at a time: a card finishes after it
is created, so one created after the cutoff cannot have finished before it.

Two sweepers on one Redis (``serve`` and a ``worker``) take turns by a lock key; were both to sweep
at once, a card would be archived twice (readers take the highest version) and removed once.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Iterable
from typing import Any

import redis.asyncio as aioredis

from gateway.archives.card_archive import CardArchive, card_record
from gateway.audit.events import AuditEvent, AuditSink
from gateway.cards.card import TERMINAL
from gateway.store.client import store_boundary
from gateway.store.ledger.codec import decode_card
from gateway.store.ledger.layout import SHARDS, card_keys, everyones_indexes, org_index, orgs_key, requester_index
from gateway.store.ledger.scripts import PRELUDE
from gateway.telemetry.metrics import count_transition

__all__ = ["LOCK_KEY", "RETIRE", "RedisCardRetention", "keep_ms_of"]

logger = logging.getLogger("countersign.retention")

LOCK_KEY = "cs:card-retention:lock"
LOCK_MS = 300_000
"""How long one sweep holds the lock at most: a sweeper that dies leaves it to lapse."""
DAY_MS = 86_400_000
CONCURRENCY = 16
"""Removals in flight at once within a batch."""
PER_SWEEP = 5_000
"""Cards one sweep removes at most: about 3 s of the sweeping process's CPU (bench/retention.py), so a
backlog (a first sweep over months of cards) is worked off a minute at a time, never by taking the
event loop from the requests it serves for long; a sweep a minute still retires 7 million cards a day."""

RETIRE = (
    PRELUDE
    + "local RETIRABLE = {"
    + ", ".join(f"[{state.value!r}] = true" for state in sorted(TERMINAL))
    + "}\n"
    + r"""
-- KEYS 9 and 10: the shard's index of the card's org and of its requester.
-- ARGV[2]: the version archived; ARGV[3]: how long ago, at least, its last event must be (ms).
local c = load()
if not c then return 'GONE' end
if c.version ~= ARGV[2] then return 'CHANGED' end
if not RETIRABLE[c.state] then return 'OPEN' end
local now = now_ms()
if now - num(c.updated_ms) < tonumber(ARGV[3]) then return 'RECENT' end
local entry = c.dedupe and open_get(c.dedupe)
if entry and string.sub(entry, 1, #c.card_id + 1) == c.card_id .. '|' then
  if num(string.sub(entry, #c.card_id + 2)) > now then return 'REPEATING' end
  open_del(c.dedupe)
  redis.call('ZREM', repeats_key, c.dedupe)
end
redis.call('DEL', card_key)
redis.call('ZREM', KEYS[9], c.card_id)
redis.call('ZREM', KEYS[10], c.card_id)
redis.call('ZREM', index_key, c.card_id)
redis.call('ZREM', timers_key, c.card_id)
if c.open_member then redis.call('ZREM', open_cards_key, c.open_member) end
return 'RETIRED'
"""
)
"""The removal of one archived card, with every check before its first write (module docstring)."""

_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
_RENEW = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"


@store_boundary
class RedisCardRetention:
    """Moves the finished cards older than `keep_ms` from Redis to `archive`; 0 keeps every card."""

    def __init__(
        self,
        client: aioredis.Redis,
        archive: CardArchive,
        *,
        keep_ms: int,
        audit: AuditSink,
        batch: int = 200,
        per_sweep: int = PER_SWEEP,
        on_retired: Callable[[str], None] = lambda status: count_transition("retire", status),
    ) -> None:
        self._client = client
        self._archive = archive
        self.keep_ms = keep_ms
        self._audit = audit
        self.batch = batch
        self.per_sweep = per_sweep
        self._left = 0  # of `per_sweep`, in the sweep under way
        self._on_retired = on_retired
        self._retire = client.register_script(RETIRE)
        self._release = client.register_script(_RELEASE)
        self._renew = client.register_script(_RENEW)
        self._token = ""
        self._now = 0  # the Redis clock when the sweep under way began (ms)

    async def sweep(self) -> int:
        """Archive and remove every card finished more than `keep_ms` ago; how many were removed.

        Returns 0 without looking when `keep_ms` is 0 or another sweeper holds the lock. Stops once
        `per_sweep` cards are removed (give or take a batch): a backlog is worked off sweep by sweep.

        Raises:
            CardArchiveError: the archive cannot be written; no card of that batch is removed.
            StoreUnavailableError: Redis cannot be reached.
        """
        if self.keep_ms <= 0:
            return 0
        token = self._token = secrets.token_hex(8)
        if not await self._client.set(LOCK_KEY, token, nx=True, px=LOCK_MS):
            return 0
        try:
            self._archive.remove_stale_drafts()
            seconds, micros = await self._client.time()
            self._now = int(seconds) * 1000 + int(micros) // 1000
            cutoff = self._now - self.keep_ms
            retired, self._left = 0, self.per_sweep
            for shard in range(SHARDS):
                for index in await self._indexes(shard):
                    if self._left <= 0:
                        return retired
                    retired += await self._sweep_index(shard, index, cutoff)
            return retired
        finally:
            await self._release(keys=[LOCK_KEY], args=[token])

    async def _indexes(self, shard: int) -> list[str]:
        """The shard's index of the cards stored before the org indexes, then its org indexes."""
        orgs: Any = await self._client.smembers(orgs_key(shard))
        return everyones_indexes(shard, orgs)

    async def _sweep_index(self, shard: int, index: str, cutoff: int) -> int:
        """Retire the cards of one index created before `cutoff` that are due; how many were retired."""
        retired, kept = 0, 0
        while True:
            # A long first sweep (a backlog of months) keeps the lock while it makes progress; one that
            # lost it (stalled past `LOCK_MS`) stops, and the sweeper that holds it now goes on.
            if not await self._renew(keys=[LOCK_KEY], args=[self._token, LOCK_MS]):
                self._left = 0
                return retired
            ids: Any = await self._client.zrangebyscore(index, "-inf", cutoff, start=kept, num=self.batch)
            if not ids:
                return retired
            card_ids = [_text(card_id) for card_id in ids]
            raws = await self._client.mget([card_keys(c, shard)[0] for c in card_ids])
            due = _due(card_ids, raws, cutoff, self._now)
            done = await self._retire_all(shard, due) if due else 0
            retired, self._left = retired + done, self._left - done
            kept += len(card_ids) - done
            if len(card_ids) < self.batch or self._left <= 0:
                return retired

    async def _retire_all(self, shard: int, due: list[dict[str, Any]]) -> int:
        """Archive `due`, then remove each card that is still as archived; how many were removed."""
        # In a thread: a batch's fsyncs must not hold up the event loop that serves requests.
        path = await asyncio.to_thread(self._archive.write, [card_record(card) for card in due], secrets.token_hex(6))
        # A few at a time: the audit sink appends concurrent events in one batch (one chained script).
        limiter = asyncio.Semaphore(CONCURRENCY)

        async def retire(card: dict[str, Any]) -> bool:
            async with limiter:
                return await self._retire_one(shard, card, path.name)

        retired = sum(await asyncio.gather(*(retire(card) for card in due)))
        logger.info("archived %d of %d finished cards to %s", retired, len(due), path.name)
        return retired

    async def _retire_one(self, shard: int, card: dict[str, Any], archive: str) -> bool:
        """Remove one archived card if the script finds it as archived (audited); whether it was removed."""
        card_id, org, subject = card["card_id"], card["requester_org"], card["requester_subject"]
        keys = [*card_keys(card_id, shard), org_index(shard, org), requester_index(shard, org, subject)]
        status = _text(await self._retire(keys=keys, args=["retire", card["version"], self.keep_ms]))
        self._on_retired(status)
        if status != "RETIRED":
            return False
        await self._audit.record(
            AuditEvent(
                action="card.archive",
                outcome="ok",
                org=org,
                tool=card.get("tool", ""),
                extra={
                    "card_id": card_id,
                    "state": card["state"],
                    "requester": subject,
                    "archive": archive,
                    "version": card["version"],
                    "chain": card["chain"],
                },
            )
        )
        return True


def _due(card_ids: Iterable[str], raws: Iterable[Any], cutoff: int, now: int) -> list[dict[str, Any]]:
    """The expanded cards of `card_ids` (stored as `raws`) that are finished, last changed before `cutoff` and
    past any repeat window at `now`. `RETIRE` checks all of it again; this only keeps a card the script would
    refuse out of the archive (a SUCCEEDED card in a repeat window longer than the retention would otherwise
    be archived again by every sweep until its window lapsed)."""
    due = []
    for card_id, raw in zip(card_ids, raws, strict=True):
        if raw is None:
            continue
        card = decode_card(raw, card_id)
        updated = int(card.get("updated_ms") or 0)
        if card.get("state") not in TERMINAL or updated > cutoff:
            continue
        # The window runs from the card's close, which is no later than its last event: this errs on waiting.
        if card.get("state") == "SUCCEEDED" and updated + int(card.get("repeat_within_ms") or 0) > now:
            continue
        due.append(card)
    return due


def keep_ms_of(days: float) -> int:
    """`Settings.card_keep_days` in ms (0: keep every card)."""
    return int(days * DAY_MS)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
