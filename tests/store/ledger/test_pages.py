"""Paging an org's cards over the shard indexes, against a real Redis: every match once, newest first.

The cards are made once for the module (their number and spread over shards is what matters), and
generated examples page through them with random filters, page sizes and scan bounds; each example
may also create a card between two pages, which must not appear (it is newer than the first page).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from gateway.cards.card import Card, CardState
from gateway.cards.contract import CardQuery
from gateway.errors import InvalidCursorError
from gateway.limits.budgets import Limits
from gateway.store.ledger.layout import requester_shard
from gateway.store.ledger.redis_ledger import SHARDS, RedisLedger
from tests.support.cards import PROPOSAL, flood
from tests.support.examples import examples

REQUESTERS = ("alice@acme.example", "dan@acme.example", "erin@acme.example")
TOOLS = ("rooms_book", "orders_refund")
UNCAPPED = Limits(open_cards_per_requester=1_000_000)
"""The population holds more open cards per requester than the default cap."""


@dataclass
class Population:
    url: str
    card_ids: list[str] = field(default_factory=list)
    """Every card made, of every org; examples add to it."""


async def _populate(url: str) -> list[str]:
    client = Redis.from_url(url)
    try:
        await client.flushdb()
        ledger = RedisLedger(client, limits=UNCAPPED)
        made: list[str] = []
        for i, (requester, tool) in enumerate((r, t) for r in REQUESTERS for t in TOOLS):
            made += await flood(client, 20 + 5 * i, requester_subject=requester, tool=tool)
            if i == 2:
                made += await _in_one_shard(ledger, 60)
        made += await flood(client, 20, requester_org="globex", requester_subject="gus@globex.example")
        for n, card_id in enumerate(made[::4]):
            if n % 2:
                assert (await ledger.cancel(card_id, actor="alice@acme.example")).ok
            else:
                assert (await ledger.reject(card_id, admin="bob@acme.example", reason="no")).ok
        return made
    finally:
        await client.aclose()


async def _in_one_shard(ledger: RedisLedger, count: int) -> list[str]:
    """A burst of cards all in shard 0: the shards' batches then cover very different spans of time,
    which is when merging them in order needs care. A card lives in its requester's shard
    (`gateway.store.ledger.layout`), so the burst comes from acme requesters of shard 0."""
    subjects = [s for s in (f"skew-{n}@acme.example" for n in range(200)) if requester_shard("acme", s) == 0][:3]
    made: list[str] = []
    for attempt in range(count):
        created = await ledger.propose(
            replace(PROPOSAL, dedupe_key=f"skew|{attempt}", requester_subject=subjects[attempt % 3])
        )
        assert created.card is not None and created.card.card_id.startswith("crd_0_")
        made.append(created.card.card_id)
    return made


async def _flush(url: str) -> None:
    client = Redis.from_url(url)
    try:
        await client.flushdb()
    finally:
        await client.aclose()


@pytest.fixture(scope="module")
def population(quiet_redis_url: str) -> Iterator[Population]:
    """About 280 cards in two orgs, in every shard and a burst in one, three states; flushed after the module."""
    made = anyio.run(_populate, quiet_redis_url)
    yield Population(url=quiet_redis_url, card_ids=made)
    anyio.run(_flush, quiet_redis_url)


def _expected(cards: list[Card], query: CardQuery) -> list[str]:
    """The listing as specified: every match, by creation time then card id, both descending."""
    matching = [card for card in cards if query.matches(card)]
    return [card.card_id for card in sorted(matching, key=lambda c: (c.created_ms, c.card_id), reverse=True)]


queries = st.builds(
    CardQuery,
    org=st.sampled_from(["acme", "globex", "initech"]),
    state=st.sampled_from([None, CardState.PENDING, CardState.CANCELLED, CardState.REJECTED]),
    tool=st.sampled_from([None, *TOOLS, "nothing_here"]),
    requester=st.sampled_from([None, *REQUESTERS, "gus@globex.example"]),
)


@settings(database=None, max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    query=queries,
    limits=st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=6),
    scan_limit=st.integers(min_value=1, max_value=80),
    late=st.booleans(),
)
def test_following_cursors_lists_every_matching_card_once_in_order(
    population: Population, query: CardQuery, limits: list[int], scan_limit: int, late: bool
) -> None:
    """Whatever the filters, page sizes and scan bound, the pages together are exactly the matches, newest
    first; no page is longer than asked; a card created between pages is not listed."""

    async def check() -> None:
        client = Redis.from_url(population.url)
        try:
            ledger = RedisLedger(client, scan_limit=scan_limit, limits=UNCAPPED)
            cards = [card for card in [await ledger.get(i) for i in population.card_ids] if card is not None]
            listed: list[str] = []
            cursor: str | None = None
            for page_number in range(2_000):
                limit = limits[page_number % len(limits)]
                page = await ledger.page(query, limit=limit, cursor=cursor)
                assert len(page.cards) <= limit
                listed += [card.card_id for card in page.cards]
                if late and page_number == 0:
                    created = await ledger.propose(
                        replace(PROPOSAL, requester_org=query.org, requester_subject=query.requester or "late@x",
                                tool=query.tool or "rooms_book", dedupe_key=f"late|{len(population.card_ids)}")
                    )  # fmt: skip
                    assert created.card is not None
                    population.card_ids.append(created.card.card_id)
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert cursor is None, "the cursor never ran out"
            assert listed == _expected(cards, query)
        finally:
            await client.aclose()

    anyio.run(check)


def _encoded(items: Any) -> str:
    return "c1." + base64.urlsafe_b64encode(json.dumps(items).encode()).decode().rstrip("=")


cursors = st.one_of(
    st.text(max_size=80),
    st.builds(lambda text: "c1." + text, st.text(max_size=40)),
    st.builds(
        _encoded,
        st.lists(
            st.one_of(
                st.none(),
                st.integers(-2, 3),
                st.booleans(),
                st.lists(st.one_of(st.integers(-5, 10**13), st.text(max_size=50), st.floats()), max_size=4),
            ),
            min_size=SHARDS - 1,
            max_size=SHARDS + 1,
        ),
    ),
)


@settings(database=None, max_examples=examples(150), deadline=None)
@given(cursor=cursors)
def test_any_other_cursor_is_refused_or_read_as_positions_of_the_own_org(population: Population, cursor: str) -> None:
    """A cursor the ledger did not issue raises InvalidCursorError, never another error; one that happens to
    decode only moves within the admin's own org (it names positions, and grants nothing)."""

    async def check() -> None:
        client = Redis.from_url(population.url)
        try:
            try:
                page = await RedisLedger(client).page(CardQuery(org="globex"), limit=50, cursor=cursor)
            except InvalidCursorError as error:
                assert error.problem.startswith("cursor:")
            else:
                assert all(card.requester_org == "globex" for card in page.cards)
        finally:
            await client.aclose()

    anyio.run(check)
