"""A card proposal for tests that drive the ledger by hand, and a flood of them."""

from __future__ import annotations

import secrets
from dataclasses import replace
from typing import Any

import anyio
from redis.asyncio import Redis

from gateway.cards.card import Card, CardState
from gateway.limits.budgets import Limits
from gateway.store.ledger.redis_ledger import Proposal, RedisLedger

PROPOSAL = Proposal(
    tool="rooms_book",
    tool_version="v1",
    arguments={"room_id": "room-atlas", "date": "2026-12-01", "start": "09:00", "end": "10:00", "title": "x"},
    args_hash="h1",
    requester_subject="alice@acme.example",
    requester_org="acme",
    requester_key_id="key_alice",
    requester_roles=frozenset({"staff"}),
    approvals_required=1,
    approver_role="approver",
    summary="Book room-atlas on 2026-12-01 from 09:00 to 10:00",
    agent_text={"title": "x"},
    decide_within_ms=60_000,
    execute_within_ms=60_000,
    dedupe_key="alice|rooms_book|h1",
)

FLOOD_CONCURRENCY = 32
"""Proposals in flight at once while flooding: enough to be quick, few enough connections for any Redis."""


async def flood(redis: Redis, count: int, **changes: Any) -> list[str]:
    """Create `count` distinct PENDING cards through the real propose script, concurrently; their ids.

    The open-card cap is raised past `count`: a flood stands for many requesters' worth of cards."""
    ledger = RedisLedger(redis, limits=Limits(open_cards_per_requester=1_000_000))
    run = secrets.token_hex(4)
    created: list[str] = []
    limiter = anyio.Semaphore(FLOOD_CONCURRENCY)

    async def one(index: int) -> None:
        async with limiter:
            result = await ledger.propose(replace(PROPOSAL, dedupe_key=f"flood|{run}|{index}", **changes))
        if result.card is None or result.status != "OK":
            raise AssertionError(f"flood proposal {index}: {result.status}")
        created.append(result.card.card_id)

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(one, index)
    return created


FINAL = frozenset({CardState.SUCCEEDED, CardState.FAILED, CardState.NEEDS_RECONCILIATION})
"""Where a worker leaves an approved card."""


async def settled(redis: Redis, card_id: str, timeout: float = 15.0) -> Card:
    """Wait (bounded) until the worker has brought the card to a final state."""
    ledger = RedisLedger(redis)
    with anyio.fail_after(timeout):
        while True:
            card = await ledger.get(card_id)
            if card is not None and card.state in FINAL:
                return card
            await anyio.sleep(0.05)


def a_card(**changes: Any) -> Card:
    """A PENDING card as the ledger would load it, with `changes` applied: for pure functions of a card."""
    fields: dict[str, Any] = {
        "card_id": "crd_1_" + "0" * 32,
        "tool": "rooms.book",
        "tool_version": "1",
        "arguments": {},
        "args_hash": "h",
        "requester_subject": "bot@acme.example",
        "requester_org": "acme",
        "requester_key_id": "k1",
        "state": CardState.PENDING,
        "version": 1,
        "idempotency_key": "cs-1",
        "transaction_id": "txn_1",
        "approvals_required": 1,
        "approvers": (),
        "summary": "Book room-eos on 2026-12-10",
        "agent_text": {"title": "Planning"},
        "created_ms": 1,
        "decide_by_ms": 2,
    }
    return Card(**{**fields, **changes})
