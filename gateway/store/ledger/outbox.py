"""The outbox: one Redis stream per ledger shard, read by one consumer group of workers.

An approved card's script appends its id to its shard's stream (``cs:{csN}:outbox``, in the
card's slot); `gateway.runtime.worker.Worker` runs one reader per shard. Each XREADGROUP names one
stream, hence one Cluster slot: a single XREADGROUP over streams of different slots is refused
by a Cluster (CROSSSLOT). Called only by `gateway.store.ledger.redis_ledger.RedisLedger`.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from gateway.cards.contract import OutboxEntry
from gateway.store.client import bounded_block
from gateway.store.ledger.layout import SHARDS, tag

__all__ = ["OUTBOX_GROUP", "ensure_outbox_group", "outbox_keys", "read_outbox"]

OUTBOX_GROUP = "workers"


def outbox_keys() -> list[str]:
    return [f"{tag(shard)}:outbox" for shard in range(SHARDS)]


async def ensure_outbox_group(client: aioredis.Redis) -> None:
    for key in outbox_keys():
        try:
            await client.xgroup_create(key, OUTBOX_GROUP, id="0", mkstream=True)
        except aioredis.ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise


async def read_outbox(
    client: aioredis.Redis,
    blocking: aioredis.Redis,
    consumer: str,
    *,
    block_ms: int,
    count: int,
    shard: int | None,
    slack: float,
) -> list[OutboxEntry]:
    """New outbox entries for `consumer`: from `shard`'s stream, waiting up to `block_ms` for the
    first (on `blocking`, bounded by `block_ms` plus `slack`); without a shard, from every shard's
    stream once, without waiting (one pipeline, which a Cluster client splits by node).

    When the streams or the group are gone (a flushed or replaced database) they are made again
    and the answer is empty: approved cards whose entries went with them are enqueued again by the
    sweeper.
    """
    try:
        if shard is not None:
            async with bounded_block(block_ms, slack):
                answer: Any = await blocking.xreadgroup(
                    OUTBOX_GROUP, consumer, {outbox_keys()[shard]: ">"}, count=count, block=block_ms
                )
            answers = [answer]
        else:
            async with client.pipeline(transaction=False) as pipe:
                for key in outbox_keys():
                    pipe.xreadgroup(OUTBOX_GROUP, consumer, {key: ">"}, count=count)
                answers = await pipe.execute(raise_on_error=False)
            if failed := [reply for reply in answers if isinstance(reply, Exception)]:
                raise failed[0]
    except aioredis.ResponseError as error:
        if "NOGROUP" not in str(error) and "UNBLOCKED" not in str(error):
            raise
        await ensure_outbox_group(client)
        return []
    return [
        OutboxEntry(stream=_text(stream), entry_id=_text(entry_id), card_id=_text(fields[b"card_id"]))
        for answer in answers
        for stream, items in answer or []
        for entry_id, fields in items
    ]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
