"""The ledger's change feed: every saved card announced on Redis, and the admin API's event stream over it."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import anyio
import httpx
import pytest
from redis.asyncio import Redis

from gateway.cards.contract import CardChange
from gateway.errors import StoreUnavailableError
from gateway.principal import KeyKind
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.agents import make_key
from tests.support.cards import PROPOSAL

pytestmark = pytest.mark.anyio


async def _card(redis: Redis, **changes: Any) -> str:
    created = await RedisLedger(redis).propose(replace(PROPOSAL, dedupe_key=secrets.token_hex(8), **changes))
    assert created.card is not None
    return created.card.card_id


async def test_every_transition_is_announced_with_the_cards_state_and_version(redis: Redis) -> None:
    """A subscriber on another connection hears the proposal and the approval, in order, with ids and
    states only."""
    ledger = RedisLedger(redis)
    heard: list[CardChange] = []
    async with ledger.changes.subscribe() as subscription:
        card_id = await _card(redis)
        assert (await ledger.approve(card_id, approver="bob@acme.example", version=1, args_hash="h1", comment="")).ok
        with anyio.fail_after(5):
            while len([c for c in heard if c.card_id == card_id]) < 2:
                change = await subscription.next_change(1.0)
                if change is not None:
                    heard.append(change)
    assert [(c.org, c.state, c.version) for c in heard if c.card_id == card_id] == [
        ("acme", "PENDING", 1), ("acme", "APPROVED", 2),
    ]  # fmt: skip


async def _events(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """(event, data) of each server-sent event; comments (keep-alives) are skipped."""
    name, data = "message", ""
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield name, data
            name, data = "message", ""
        elif line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data += line.removeprefix("data:").strip()


async def test_the_event_stream_shows_a_change_made_elsewhere_and_nothing_of_another_org(
    mcp_url: str, redis: Redis
) -> None:
    """An admin's open stream on the gateway gets the row of their org's card decided on another Redis
    connection (as by another gateway process); a card of globex decided first never shows up."""
    key = await make_key(redis, kind=KeyKind.ADMIN, subject="bob@acme.example", roles=("approver",))
    ours = await _card(redis)
    theirs = await _card(redis, requester_org="globex")
    other_client = Redis.from_url(_url(redis))
    other_process = RedisLedger(other_client)
    base = mcp_url.removesuffix("/mcp")
    seen: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=f"{base}/admin/api", timeout=10) as http:
        headers = {"authorization": f"Bearer {key}"}
        async with http.stream("GET", "/cards/events", headers=headers) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["cache-control"] == "no-store"
            with anyio.fail_after(10):
                async for name, data in _events(response):
                    if name == "ready":
                        await other_process.reject(theirs, admin="eve@globex.example", reason="no")
                        await other_process.reject(ours, admin="carol@acme.example", reason="no")
                    elif name == "card":
                        seen.append(json.loads(data))
                        if seen[-1]["card_id"] == ours:
                            break
        refused = await http.get("/cards/events")
    await other_client.aclose()
    assert theirs not in {row["card_id"] for row in seen}
    row = seen[-1]
    assert (row["state"], row["decision"], row["version"], row["deadline"]) == ("REJECTED", "rejected", 2, None)
    assert "arguments" not in row and "agent_text" not in row
    assert refused.status_code == 401


def _url(redis: Redis) -> str:
    kwargs = redis.get_connection_kwargs()
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


async def test_a_user_the_acl_denies_the_channel_still_moves_cards_and_cannot_watch(redis: Redis) -> None:
    """The announcement is no guard: a Redis user without channel rights proposes and approves as before
    (no half-applied script), while subscribing fails as a store failure, so its console reads again instead."""
    user = f"countersign-no-channels-{secrets.token_hex(4)}"
    await redis.acl_setuser(user, enabled=True, nopass=True, keys=["~*"], channels=[], commands=["+@all"])
    limited = Redis.from_url(_url(redis).replace("redis://", f"redis://{user}:any@", 1))
    try:
        ledger = RedisLedger(limited)
        created = await ledger.propose(replace(PROPOSAL, dedupe_key=secrets.token_hex(8)))
        assert created.ok and created.card is not None
        approved = await ledger.approve(created.card.card_id, approver="bob@acme.example", version=1,
                                        args_hash="h1", comment="")  # fmt: skip
        assert approved.ok and approved.card is not None and approved.card.state.value == "APPROVED"
        with pytest.raises(StoreUnavailableError):
            async with ledger.changes.subscribe():
                pass
    finally:
        await limited.aclose()
        await redis.acl_deluser(user)
