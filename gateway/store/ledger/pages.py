"""Paging an org's cards over the ledger's per-shard indexes, with an opaque cursor.

Who calls it: `RedisLedger.page`, for the admin card list. It reads only what the propose script
already maintains: in each shard, the index of an org's cards (or of one requester's), a zset
scored by creation time (the Redis clock, in ms). Nothing here writes, and every command names
keys of one shard only, so it runs unchanged on Redis Cluster.

The order is newest first, ties broken by card id (descending): exactly each zset's ZREVRANGE
order, so merging the shards on that key gives one total order. The cursor holds one position per
shard: the card the shard stopped at (and whether that card was examined already), "from the
newest", or "done". A position names a member, not a rank, so cards created meanwhile cannot shift
a page: the member's rank is found again (ZREVRANK) and whatever is newer than it is dropped. A
card created after the first page is newer than every position and is not listed (list again to
see it); no card that existed is skipped or listed twice.

A page: one ZREVRANGE of up to `batch` entries per shard that is not done, merged; then the merged
entries are examined in order, loading the cards (pipelined GETs), until `limit` cards matched or
`scan_limit` were examined. A shard whose batch came back full bounds how far the merge may go:
beyond its last entry it may hold cards not read yet, so the page stops there, in order.

Cost: a page reads at most ``SHARDS * batch`` index entries and loads at most `scan_limit` cards,
whatever the filters. The state and tool of a card are not in the index, so those filters are
applied to the loaded cards: a filter that matches few cards gives pages with few or no cards (and
a `next_cursor`), and following the cursors to the end reads every card of the org once. The
requester filter reads that requester's own index, so it costs only the requester's cards. An
index of the open cards of each org, kept by the transition scripts, would make ``state=PENDING``
cost only the open cards; until one exists, the console and the CLI follow the cursors, so no card
is out of their view.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis.asyncio as aioredis

from gateway.cards.card import Card
from gateway.cards.contract import CardPage, CardQuery
from gateway.errors import InvalidCursorError

__all__ = ["SCAN_LIMIT", "decode_cursor", "encode_cursor", "read_page"]

SCAN_LIMIT = 1000
"""Most cards one page examines (loads and tests against the filters)."""
MAX_CURSOR = 4096
"""Longest cursor accepted, in characters (one issued for eight shards is about 600)."""
_PREFIX = "c1."
_NOT_ISSUED = "cursor: not a cursor this list issued; list again without one"

Load = Callable[[Sequence[str]], Awaitable[list[Card | None]]]
"""Loads cards by id, in order; None for a card that is not there."""
Key = tuple[int, str]
"""An index entry as (created_ms, card_id); the list order is this key, descending."""


@dataclass(frozen=True, slots=True)
class Position:
    """Where one shard's part of a listing goes on: at `key`, and whether that entry was examined."""

    key: Key
    examined: bool

    def precedes(self, entry: Key) -> bool:
        """Whether `entry` is still to come after this position."""
        return entry < self.key or (entry == self.key and not self.examined)


START: Literal["start"] = "start"
"""A shard not read yet: from its newest entry."""
DONE: Literal["done"] = "done"
"""A shard with nothing left."""
Shard = Position | Literal["start", "done"]


@dataclass(frozen=True, slots=True)
class _Batch:
    entries: list[Key]
    """The entries after the shard's position, newest first."""
    last: Key | None
    """The last entry the range returned, kept or not."""
    full: bool
    """The range returned all it was asked for: the shard may hold more beyond `last`."""


async def read_page(
    client: aioredis.Redis,
    indexes: Sequence[str],
    query: CardQuery,
    *,
    limit: int,
    cursor: str | None,
    load: Load,
    scan_limit: int = SCAN_LIMIT,
) -> CardPage:
    """At most `limit` cards matching `query` after `cursor`, newest first, from the zsets `indexes`.

    `indexes[n]` is shard n's index to read (of the org, or of the requester). See the module
    docstring for the order, the cursor and the cost.

    Raises:
        InvalidCursorError: `cursor` was not issued by `encode_cursor` for this many shards.
    """
    shards: list[Shard] = decode_cursor(cursor, len(indexes)) if cursor is not None else [START] * len(indexes)
    limit, scan_limit = max(1, limit), max(1, scan_limit)
    batch = min(scan_limit, max(limit, scan_limit // 4))
    batches = await _read_batches(client, indexes, shards, batch)
    merged = sorted(((entry, n) for n, b in enumerate(batches) if b is not None for entry in b.entries), reverse=True)
    bounds = [b.last for b in batches if b is not None and b.full and b.last is not None]
    if bounds:
        merged = [(entry, n) for entry, n in merged if entry >= max(bounds)]
    counts = [0] * len(batches)  # entries examined per shard: always a prefix of its batch, in order
    cards: list[Card] = []
    index = 0
    while index < min(len(merged), scan_limit) and len(cards) < limit:
        chunk = merged[index : min(index + max(limit - len(cards), 32), scan_limit)]
        for (_, n), card in zip(chunk, await load([card_id for (_, card_id), _ in chunk]), strict=True):
            index += 1
            counts[n] += 1
            if card is not None and query.matches(card):
                cards.append(card)
                if len(cards) == limit:
                    break
    following = [_following(shards[n], b, counts[n]) for n, b in enumerate(batches)]
    more = any(shard != DONE for shard in following)
    return CardPage(cards=cards, next_cursor=encode_cursor(following) if more else None)


def _following(shard: Shard, batch: _Batch | None, examined: int) -> Shard:
    """Where a shard goes on after a page that examined the first `examined` entries of its batch."""
    if batch is None:
        return DONE
    if examined < len(batch.entries):
        return Position(batch.entries[examined], examined=False)
    if batch.full:
        # The shard may hold more beyond its batch. With nothing examined (every entry it returned
        # was dropped as already passed), it goes on from where it was.
        return Position(batch.entries[examined - 1], examined=True) if examined else shard
    return DONE


async def _read_batches(
    client: aioredis.Redis, indexes: Sequence[str], shards: Sequence[Shard], batch: int
) -> list[_Batch | None]:
    """Up to `batch` entries of each shard after its position (None for a shard that is done)."""
    starts: dict[int, int] = {n: 0 for n, shard in enumerate(shards) if shard == START}
    placed = [(n, shard) for n, shard in enumerate(shards) if isinstance(shard, Position)]
    if placed:
        async with client.pipeline(transaction=False) as pipe:
            for n, position in placed:
                pipe.zrevrank(indexes[n], position.key[1])
                # Where the position's own millisecond ends: the fallback for a member not in this
                # index (a cursor reused with another filter), which resumes at older scores.
                pipe.zcount(indexes[n], position.key[0], "+inf")
            answers: list[Any] = await pipe.execute()
        for i, (n, position) in enumerate(placed):
            rank, newer = answers[2 * i], answers[2 * i + 1]
            starts[n] = int(newer) if rank is None else int(rank) + (1 if position.examined else 0)
    ranges: list[Any] = []
    if starts:
        async with client.pipeline(transaction=False) as pipe:
            for n, start in sorted(starts.items()):
                pipe.zrevrange(indexes[n], start, start + batch - 1, withscores=True)
            ranges = await pipe.execute()
    read = dict(zip(sorted(starts), ranges, strict=True))
    batches: list[_Batch | None] = []
    for n, shard in enumerate(shards):
        if n not in read:
            batches.append(None)
            continue
        raw = [(int(score), _text(member)) for member, score in read[n]]
        # A card created between finding the rank and reading the range pushes the range one place
        # toward the newest: drop what the position already passed.
        kept = [entry for entry in raw if not isinstance(shard, Position) or shard.precedes(entry)]
        batches.append(_Batch(entries=kept, last=raw[-1] if raw else None, full=len(raw) == batch))
    return batches


def encode_cursor(shards: Sequence[Shard]) -> str:
    """The opaque cursor of `shards`' positions: versioned, base64url JSON, one item per shard.

    An item is ``[created_ms, card_id, examined]`` for a position, ``1`` for a shard not read yet and
    ``0`` for a shard that is done.
    """
    items = [
        [shard.key[0], shard.key[1], int(shard.examined)] if isinstance(shard, Position) else int(shard == START)
        for shard in shards
    ]
    text = json.dumps(items, separators=(",", ":")).encode()
    return _PREFIX + base64.urlsafe_b64encode(text).decode().rstrip("=")


def decode_cursor(cursor: str, count: int) -> list[Shard]:
    """The positions of a cursor `encode_cursor` issued for `count` shards.

    Raises:
        InvalidCursorError: anything else.
    """
    if len(cursor) > MAX_CURSOR or not cursor.startswith(_PREFIX):
        raise InvalidCursorError(_NOT_ISSUED)
    body = cursor.removeprefix(_PREFIX)
    try:
        items = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (binascii.Error, ValueError):
        raise InvalidCursorError(_NOT_ISSUED) from None
    if not isinstance(items, list) or len(items) != count:
        raise InvalidCursorError(_NOT_ISSUED)
    return [_shard(item, n) for n, item in enumerate(items)]


def _shard(item: Any, n: int) -> Shard:
    if item == 0 and type(item) is int:
        return DONE
    if item == 1 and type(item) is int:
        return START
    if not (isinstance(item, list) and len(item) == 3):
        raise InvalidCursorError(_NOT_ISSUED)
    score, card_id, examined = item
    if type(score) is not int or score < 0 or type(examined) is not int or examined not in (0, 1):
        raise InvalidCursorError(_NOT_ISSUED)
    if not isinstance(card_id, str) or not card_id.startswith(f"crd_{n}_") or len(card_id) > 64:
        raise InvalidCursorError(_NOT_ISSUED)
    return Position((score, card_id), examined=bool(examined))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
