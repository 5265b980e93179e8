"""The dedupe entries in small buckets (gateway/store/ledger/layout.py `open_bucket`): the scripts and Python
name the same bucket, a bucket stays a listpack, and entries written before the buckets, in the shard's one
hash, still answer, move out with their card's next write, and are removed, repeated and pruned."""

from __future__ import annotations

import dataclasses

import anyio
import pytest
from redis.asyncio import Redis

from gateway.cards.card import CardState
from gateway.store.ledger.layout import card_keys, open_buckets
from gateway.store.ledger.redis_ledger import RedisLedger, card_shard
from gateway.store.probes import LedgerProbe
from tests.support.cards import PROPOSAL

pytestmark = pytest.mark.anyio


@pytest.fixture
def redis(quiet: Redis) -> Redis:
    """These tests move cards by hand: the database no worker drains (conftest's `quiet`)."""
    return quiet


async def _entries(redis: Redis, card_id: str) -> dict[str, tuple[str, str]]:
    """Where the dedupe entries of `card_id` are: hash key -> (field, value)."""
    shard = card_shard(card_id)
    assert shard is not None
    found = {}
    for key in open_buckets(shard):
        for name, value in (await redis.hgetall(key)).items():
            if value.decode().startswith(card_id):
                found[key] = (name.decode(), value.decode())
    return found


async def _as_written_before(redis: Redis, card_id: str) -> str:
    """Move the card's entry from its bucket to the shard's one hash, as the ledger wrote it before the buckets."""
    [(bucket, (name, value))] = (await _entries(redis, card_id)).items()
    older = bucket.rsplit(":", 1)[0]
    assert older == card_keys(card_id, card_shard(card_id) or 0)[2]
    await redis.hdel(bucket, name)
    await redis.hset(older, name, value)
    return older


async def test_a_proposal_writes_its_entry_in_the_bucket_python_names_and_the_bucket_is_a_listpack(
    redis: Redis,
) -> None:
    """The bucket the script writes is the one `open_bucket` names (its key's suffix is the entry's first hex
    digits), and it is kept compactly."""
    ledger = RedisLedger(redis)
    created = await ledger.propose(PROPOSAL)
    assert created.card is not None
    [(bucket, (name, _))] = (await _entries(redis, created.card.card_id)).items()
    assert bucket.endswith(f":open:{name[:2]}")
    assert await redis.object("ENCODING", bucket) == b"listpack"
    again = await ledger.propose(PROPOSAL)
    assert again.status == "EXISTING" and again.card is not None and again.card.card_id == created.card.card_id


async def test_an_entry_written_before_the_buckets_answers_and_moves_to_its_bucket_on_the_next_write(
    redis: Redis,
) -> None:
    """An open card whose entry is in the older hash is still found by an identical proposal and counted by the
    gauges; its approval writes the entry in its bucket and takes it out of the older hash."""
    ledger = RedisLedger(redis)
    created = await ledger.propose(PROPOSAL)
    assert created.card is not None
    card_id = created.card.card_id
    older = await _as_written_before(redis, card_id)
    again = await ledger.propose(PROPOSAL)
    assert again.status == "EXISTING" and again.card is not None and again.card.card_id == card_id
    assert (await LedgerProbe(redis, cache_seconds=0).gauges()).open_cards["PENDING"] == 1
    approved = await ledger.approve(card_id, approver="root@acme.example", version=created.card.version,
                                    args_hash=created.card.args_hash, comment="")  # fmt: skip
    assert approved.ok
    [bucket] = await _entries(redis, card_id)
    assert bucket != older and await redis.hlen(older) == 0


async def test_an_entry_written_before_the_buckets_is_removed_when_its_card_closes(redis: Redis) -> None:
    """Cancelling a card whose entry is in the older hash removes the entry: the next identical proposal files
    a new card."""
    ledger = RedisLedger(redis)
    created = await ledger.propose(PROPOSAL)
    assert created.card is not None
    await _as_written_before(redis, created.card.card_id)
    assert (await ledger.cancel(created.card.card_id, actor=PROPOSAL.requester_subject)).ok
    assert await _entries(redis, created.card.card_id) == {}
    again = await ledger.propose(PROPOSAL)
    assert again.status == "OK" and again.card is not None and again.card.card_id != created.card.card_id


async def test_a_repeat_entry_written_before_the_buckets_is_repeated_then_pruned(redis: Redis) -> None:
    """A SUCCEEDED card's repeat entry in the older hash answers `repeated` within its window, and a later
    proposal prunes it once the window has passed."""
    ledger = RedisLedger(redis, repeat_window_ms=1_000)
    created = await ledger.propose(PROPOSAL)
    assert created.card is not None
    card_id = created.card.card_id
    assert (await ledger.approve(card_id, approver="root@acme.example", version=created.card.version,
                                 args_hash=created.card.args_hash, comment="")).ok  # fmt: skip
    claimed = await ledger.claim(card_id, worker="w1", lease_ms=60_000)
    assert claimed.card is not None and (await ledger.dispatch(card_id, fence=claimed.card.fence)).ok
    assert (await ledger.complete(card_id, fence=claimed.card.fence, outcome=CardState.SUCCEEDED, reference="r",
                                  evidence={}, settle_ms=0)).ok  # fmt: skip
    older = await _as_written_before(redis, card_id)
    org, subject = PROPOSAL.requester_org, PROPOSAL.requester_subject
    repeated = await ledger.repeated(org, subject, PROPOSAL.dedupe_key)
    assert repeated is not None and repeated.card_id == card_id
    now = await ledger.server_time_ms()
    with anyio.fail_after(5):
        while await ledger.server_time_ms() <= now + 1_000:
            await anyio.sleep(0.01)
    assert await ledger.repeated(org, subject, PROPOSAL.dedupe_key) is None
    other = await ledger.propose(dataclasses.replace(PROPOSAL, dedupe_key="another"))  # prunes lapsed entries
    assert other.status == "OK"
    assert await redis.hlen(older) == 0 and await _entries(redis, card_id) == {}
