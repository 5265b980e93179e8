"""Where the ledger keeps a card: its shard, and the names of the keys its scripts touch.

Cards are spread over `SHARDS` hash tags ``{csN}``; every key of one shard carries its tag, so a
script touches one Redis Cluster slot. A card's shard is chosen from its requester (org and
subject) and written into its id (``crd_<shard>_<hex>``), so every later transition finds it from
the id alone, and all of a requester's cards, its open-card count and its daily count of policy
approvals (`policy_budget_key`), live in one shard.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable

__all__ = [
    "CHANGES_CHANNEL",
    "SHARDS",
    "card_keys",
    "card_shard",
    "OPEN_BUCKET_DIGITS",
    "count_tag",
    "everyones_indexes",
    "open_cards_key",
    "open_bucket",
    "open_buckets",
    "open_count_key",
    "org_index",
    "policy_budget_key",
    "orgs_key",
    "requester_index",
    "requester_shard",
    "requester_tag",
    "tag",
]

SHARDS = 8
OPEN_BUCKET_DIGITS = 2
"""How many leading hex digits of a stored dedupe key name its bucket (`open_bucket`): 256 buckets a shard."""
CHANGES_CHANNEL = "cs:card-changes"
"""The pub/sub channel every saved card is announced on (`gateway.store.ledger.scripts`). Channels are
per server, not per database: a listener loads each announced card from its own database."""
_CARD_ID = re.compile(r"^crd_([0-9]{1,2})_[0-9a-f]{32}$")


def card_shard(card_id: str) -> int | None:
    """The shard of a well-formed card id, or None (then the card cannot exist)."""
    match = _CARD_ID.fullmatch(card_id)
    if match is None or int(match.group(1)) >= SHARDS:
        return None
    return int(match.group(1))


def tag(shard: int) -> str:
    return f"cs:{{cs{shard}}}"


def card_keys(card_id: str, shard: int) -> list[str]:
    """The keys every script gets, in the order of the prelude's KEYS comment (`gateway.store.ledger.scripts`)."""
    prefix = tag(shard)
    return [
        f"{prefix}:card:{card_id}",
        f"{prefix}:outbox",
        f"{prefix}:open",
        f"{prefix}:index",
        f"{prefix}:timers",
        open_cards_key(shard),
        f"{prefix}:repeats",
        open_count_key(shard),
    ]


def open_bucket(shard: int, dedupe: str) -> str:
    """The small hash of the shard's dedupe entries (stored dedupe key -> ``<card id>|<until ms>``) that
    `dedupe` belongs to: ``...:open:<its first OPEN_BUCKET_DIGITS hex digits>``. The scripts name it the
    same way from the card (`gateway.store.ledger.scripts`).

    Why buckets: one hash of every entry of a shard is a hashtable past 128 entries (about 150 B an
    entry); a bucket under ``hash-max-listpack-entries`` (128) stays a listpack (an entry costs its
    bytes, 32 + 52, plus a few). 256 buckets a shard keep every bucket a listpack up to about 20,000
    entries a shard (160,000 open or repeat-window cards over the 8 shards: a mean of 80 a bucket,
    the fullest still under 128); past that the fullest become hashtables, which costs bytes, never
    correctness. The shard's one hash of the entries written before (``...:open``, key 3 of every
    script) is still read, and an entry leaves it when its card next writes one.
    """
    return f"{tag(shard)}:open:{dedupe[:OPEN_BUCKET_DIGITS]}"


def open_buckets(shard: int) -> list[str]:
    """Every dedupe bucket of the shard (`open_bucket`), then the shard's hash of older entries."""
    width = OPEN_BUCKET_DIGITS
    return [f"{tag(shard)}:open:{n:0{width}x}" for n in range(16**width)] + [f"{tag(shard)}:open"]


def open_cards_key(shard: int) -> str:
    """The shard's set of the cards stored before `open_count_key` that count against their requester's
    cap (see the prelude)."""
    return f"{tag(shard)}:open_cards"


def open_count_key(shard: int) -> str:
    """The shard's hash of requester tag -> how many of its cards count against its cap (see the prelude)."""
    return f"{tag(shard)}:open_count"


@functools.lru_cache(maxsize=4096)  # a proposal names its requester's keys three times: hash it once
def requester_tag(org: str, subject: str) -> str:
    """A requester's fixed-length name in keys and in the open-card set: hex, so never a ``:``."""
    return hashlib.sha256(f"{org}|{subject}".encode()).hexdigest()[:16]


def count_tag(org: str, subject: str) -> str:
    """A requester's field in the open-card counts (`open_count_key`): the scripts derive it from the card
    itself (Lua has SHA-1, not SHA-256), so no card stores it."""
    return hashlib.sha1(f"{org}|{subject}".encode()).hexdigest()[:16]  # a name, not a secret


def requester_shard(org: str, subject: str) -> int:
    return int(requester_tag(org, subject)[:8], 16) % SHARDS


def org_index(shard: int, org: str) -> str:
    """The shard's index of one org's cards (a zset scored by creation time): ``...:org:<org tag>``."""
    return f"{tag(shard)}:org:{_org_tag(org)}"


@functools.lru_cache(maxsize=1024)
def _org_tag(org: str) -> str:
    return hashlib.sha256(org.encode()).hexdigest()[:16]


def everyones_indexes(shard: int, org_tags: Iterable[bytes | str]) -> list[str]:
    """Every index of the shard that lists cards of everyone: the shard index of the cards stored before
    the org indexes, then the index of each org tag `orgs_key` holds (in tag order)."""
    tags = sorted(t.decode() if isinstance(t, bytes) else t for t in org_tags)
    return [f"{tag(shard)}:index", *(f"{tag(shard)}:org:{org_tag}" for org_tag in tags)]


def orgs_key(shard: int) -> str:
    """The shard's set of the org tags that have an index there: how a listing of everyone finds them."""
    return f"{tag(shard)}:orgs"


def requester_index(shard: int, org: str, subject: str) -> str:
    return f"{tag(shard)}:by:{requester_tag(org, subject)}"


def policy_budget_key(org: str, subject: str, day: str) -> str:
    """The count of a requester's policy approvals on one UTC `day` (``YYYYMMDD``), in its cards' shard."""
    return f"{tag(requester_shard(org, subject))}:policy:{count_tag(org, subject)}:{day}"
