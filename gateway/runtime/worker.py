"""The worker: runs approved cards from the outbox, and keeps every card's clock.

Who runs it: `countersign serve` (inside the gateway process, by default) and `countersign worker`
(its own process; run as many as you like). It is a driver, like the MCP surface: it decides
nothing itself. Two loops:

* the outbox consumer reads card ids with a consumer group and hands each to
  `WritePath.run_approved`, which claims the card (a compare-and-set with a lease and a fencing
  token) before anything is sent, so a duplicate or replayed entry can never run a card twice;
* the sweeper wakes every `sweep_seconds`, asks the ledger which card timers are due (by the Redis
  server's clock) and moves each on: an undecided or unexecuted card expires, an approved card
  whose outbox entry may be lost is enqueued again, a lease that ran out is recovered (back to
  APPROVED if nothing was sent, UNKNOWN if it may have been), and an UNKNOWN write is reconciled
  by a status query.

An outbox entry is acknowledged only after its card was handled; a worker that dies leaves its
cards to the sweeper of any other worker.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket

from opentelemetry.trace import SpanKind

from gateway.cards.card import CardState
from gateway.cards.contract import Ledger, OutboxEntry
from gateway.errors import StoreUnavailableError
from gateway.executor import WritePath
from gateway.runtime.background import run_forever
from gateway.telemetry.metrics import worker_step
from gateway.telemetry.tracing import span

__all__ = ["Worker"]

logger = logging.getLogger(__name__)


class Worker:
    """One worker process's loops over the shared ledger."""

    def __init__(
        self,
        executor: WritePath,
        ledger: Ledger,
        *,
        name: str | None = None,
        block_ms: int = 1000,
        sweep_seconds: float = 0.25,
        requeue_ms: int = 10_000,
    ) -> None:
        self._executor = executor
        self._ledger = ledger
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self._block_ms = block_ms
        self._sweep_seconds = sweep_seconds
        self._requeue_ms = requeue_ms

    async def run(self) -> None:
        """Run both loops until cancelled. A store that does not answer is logged and retried, never fatal."""
        while True:
            try:
                await self._ledger.ensure_outbox_group()
                break
            except StoreUnavailableError as error:
                logger.error("worker cannot reach the ledger (%s); retrying", error.cause)
                await asyncio.sleep(1.0)
        # A bug in a step does not stop the worker: a card it left mid-way is safe, its lease runs
        # out and the sweeper recovers it (APPROVED if nothing was sent, else UNKNOWN).
        retry = (StoreUnavailableError,)
        async with asyncio.TaskGroup() as group:
            # One reader per outbox shard: each blocking read names one stream, in one Cluster slot.
            for shard in self._ledger.outbox_shards():
                group.create_task(
                    run_forever(
                        functools.partial(self.consume_once, shard), what="outbox read", pause_seconds=0, retry_on=retry
                    )
                )
            group.create_task(
                run_forever(self.sweep_once, what="sweep", pause_seconds=self._sweep_seconds, retry_on=retry)
            )

    async def consume_once(self, shard: int | None = None) -> int:
        """Handle the outbox entries of `shard` that arrive within one blocking read, or (no shard) those
        waiting in every shard now. Returns how many."""
        entries = await self._ledger.read_outbox(self.name, block_ms=self._block_ms, shard=shard)
        await asyncio.gather(*(self._handle(entry) for entry in entries))
        return len(entries)

    async def _handle(self, entry: OutboxEntry) -> None:
        # Each step is the root of its own trace (nothing upstream is waiting on it), tagged with its card.
        with (
            span("worker run_approved", card_id=entry.card_id, kind=SpanKind.CONSUMER, root=True),
            worker_step("run_approved"),
        ):
            await self._executor.run_approved(entry.card_id, worker=self.name)
        await self._ledger.ack(entry)

    async def sweep_once(self) -> int:
        """Move on every card whose timer is due. Returns how many were looked at."""
        now_ms = await self._ledger.server_time_ms()
        due = await self._ledger.due(now_ms=now_ms)
        for card_id in due:
            # Only a due card opens a span: an idle sweep, four times a second, would be noise.
            with span("worker sweep", card_id=card_id, root=True), worker_step("sweep"):
                await self._move_on(card_id)
        return len(due)

    async def _move_on(self, card_id: str) -> None:
        card = await self._ledger.get(card_id)
        if card is None or card.state in (CardState.PENDING, CardState.APPROVED):
            await self._ledger.sweep_open(card_id, requeue_ms=self._requeue_ms)
        elif card.state is CardState.EXECUTING:
            recovered = await self._ledger.recover(card_id)
            if recovered.extra.get("action") == "unknown":
                logger.warning("card %s: worker lost its lease after dispatch; outcome unknown", card_id)
        elif card.state is CardState.UNKNOWN:
            await self._executor.reconcile(card_id, worker=self.name)
