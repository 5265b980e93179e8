"""What operators ask of Redis: the ledger's gauges for a scrape, and whether the audit stream takes writes.

Who calls it: the ``/metrics`` endpoint (`LedgerProbe.gauges`) and ``/readyz`` (`LedgerProbe.audit_problem`).
Both only read.

Open cards by state and worker lag are read from the ledger itself, so every replica reports the
same numbers and nothing drifts: the shards' open-card hashes name every card not yet final (and
the SUCCEEDED cards of the repeat window, read and skipped like any final card), and
one pipelined ``GET`` each gives its state (and, for an APPROVED card, when it was approved). That is
one pipelined round trip for the buckets plus one for the cards, linear in the open cards (bounded per principal by
``[limits]``; at most `MAX_SCANNED` are read), and the answer is kept `cache_seconds` so frequent
scrapes of several replicas cost Redis no more.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from gateway.cards.card import CardState
from gateway.store.client import store_boundary
from gateway.store.ledger.codec import decode_card
from gateway.store.ledger.layout import open_buckets
from gateway.store.ledger.redis_ledger import SHARDS, RedisLedger, card_shard

__all__ = ["MAX_SCANNED", "LedgerGaugeValues", "LedgerProbe"]

MAX_SCANNED = 20_000
"""The most open cards one scrape reads (about 2 KB each); past it the gauges count the first ones."""

_FINAL = frozenset(state.value for state in CardState) - {
    CardState.PENDING.value,
    CardState.APPROVED.value,
    CardState.EXECUTING.value,
    CardState.UNKNOWN.value,
}


@dataclass(frozen=True, kw_only=True, slots=True)
class LedgerGaugeValues:
    open_cards: dict[str, int] = field(default_factory=dict)
    """Cards not yet final, by state; every open state is present (0 when none)."""
    worker_lag_seconds: float = 0.0
    """Age of the oldest APPROVED card (approved, not yet claimed by a worker); 0 when there is none."""


@store_boundary
class LedgerProbe:
    """Read-only questions about the ledger's Redis."""

    def __init__(
        self, client: aioredis.Redis, *, cache_seconds: float = 5.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._client = client
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._cached: tuple[float, LedgerGaugeValues] | None = None

    async def gauges(self) -> LedgerGaugeValues:
        """Open cards by state and worker lag, at most `cache_seconds` old."""
        now = self._clock()
        if self._cached is not None and now - self._cached[0] < self._cache_seconds:
            return self._cached[1]
        values = await self._read()
        self._cached = (now, values)
        return values

    async def _read(self) -> LedgerGaugeValues:
        async with self._client.pipeline(transaction=False) as pipe:
            for shard in range(SHARDS):
                for key in open_buckets(shard):
                    pipe.hvals(key)
            pipe.time()
            answers: list[Any] = await pipe.execute()
        seconds, micros = answers[-1]
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        ids = [_text(value).partition("|")[0] for values in answers[:-1] for value in values][:MAX_SCANNED]
        read: list[str] = []
        async with self._client.pipeline(transaction=False) as pipe:
            for card_id in ids:
                where = card_shard(card_id)
                if where is not None:
                    pipe.get(RedisLedger._keys(card_id, where)[0])
                    read.append(card_id)
            raws: list[Any] = await pipe.execute() if read else []
        counts = {state: 0 for state in ("PENDING", "APPROVED", "EXECUTING", "UNKNOWN")}
        oldest: int | None = None
        for card_id, raw in zip(read, raws, strict=True):
            if not raw:
                continue  # finished between the two reads
            card = decode_card(raw, card_id)
            state = str(card.get("state", ""))
            if state in _FINAL or not state:
                continue
            counts[state] = counts.get(state, 0) + 1
            if state == CardState.APPROVED.value and card.get("approved_ms"):
                approved = int(card["approved_ms"])
                oldest = approved if oldest is None else min(oldest, approved)
        lag = max(now_ms - oldest, 0) / 1000 if oldest is not None else 0.0
        return LedgerGaugeValues(open_cards=counts, worker_lag_seconds=lag)

    async def audit_problem(self) -> str | None:
        """Why the audit stream would refuse an append now (a read-only replica, out of memory), or None."""
        role: Any = await self._client.execute_command("ROLE")  # type: ignore[no-untyped-call]
        if _text(role[0]) != "master":
            return f"Redis is a {_text(role[0])}: the audit stream is read-only here"
        memory: Any = await self._client.info("memory")
        limit = int(memory.get("maxmemory", 0) or 0)
        if limit and int(memory.get("used_memory", 0)) >= limit:
            return "Redis is at maxmemory: appends are refused (noeviction)"
        return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
