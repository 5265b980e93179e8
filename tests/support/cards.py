"""A card proposal for tests that drive the ledger by hand, a flood of them, and approving a card as a person."""

from __future__ import annotations

import secrets
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio
import httpx
from redis.asyncio import Redis

from gateway.cards.card import Card, CardState
from gateway.limits.budgets import Limits
from gateway.principal import KeyKind, Principal
from gateway.store.keys import KeyStore
from gateway.store.ledger.redis_ledger import Proposal, RedisLedger

if TYPE_CHECKING:
    from gateway.runtime.app import Gateway

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


APPROVER = "root@acme.example"
"""The admin who approves cards in tests: never the requester of a test card."""


async def approve(
    ledger: RedisLedger, card_id: str, *, approver: str = APPROVER, comment: str = "", requeue_ms: int = 10_000
) -> Card:
    """Approve the card `card_id` as `approver`, at its current version and arguments hash; the card after
    (APPROVED, or still PENDING while a quorum waits for more approvers)."""
    card = await ledger.get(card_id)
    assert card is not None
    result = await ledger.approve(
        card_id,
        approver=approver,
        version=card.version,
        args_hash=card.args_hash,
        comment=comment,
        requeue_ms=requeue_ms,
    )
    assert result.ok, result.status
    assert result.card is not None
    return result.card


async def sent_and_unknown(ledger: RedisLedger, card_id: str, *, args_hash: str = "h1") -> Card:
    """Take the PENDING card `card_id` (version 1) through approval, a claim and a send whose outcome was lost:
    the card as it is then, UNKNOWN, for a test to settle by hand (`RedisLedger.reconcile`)."""
    approved = await ledger.approve(card_id, approver="carol@acme.example", version=1, args_hash=args_hash, comment="")
    assert approved.ok, approved.status
    claim = await ledger.claim(card_id, worker="w1", lease_ms=5000)
    assert claim.card is not None and (await ledger.dispatch(card_id, fence=claim.card.fence)).ok
    done = await ledger.complete(
        card_id, fence=claim.card.fence, outcome=CardState.UNKNOWN, reference="", evidence={}, settle_ms=0
    )
    assert done.ok and done.card is not None and done.card.state is CardState.UNKNOWN
    return done.card


async def approved_card(
    gateway: Gateway, principal: Principal, tool: str, arguments: dict[str, Any], **approval: Any
) -> Card:
    """A card filed by `principal` calling the write tool `tool` through the agent path, then approved by
    someone else (`approve`, which `approval` is passed to): the start of every test of the write path."""
    receipt = (await gateway.executor.agent.execute(principal, tool, arguments)).for_model()
    assert "card_id" in receipt, receipt
    card = await gateway.ledger.get(receipt["card_id"])
    assert card is not None and card.state is CardState.PENDING
    approved = await approve(gateway.ledger, card.card_id, **approval)
    assert approved.state is CardState.APPROVED
    return approved


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


async def approve_as_admin(redis: Redis, base_url: str, card_id: str, *, approver: str = "root@acme.example") -> None:
    """Approve `card_id` as an administrator would: an admin key, through the admin API at `base_url`, at the
    card's current version and arguments hash."""
    card = await RedisLedger(redis).get(card_id)
    assert card is not None
    token, _ = await KeyStore(redis).create(kind=KeyKind.ADMIN, subject=approver, org=card.requester_org,
                                          roles=("approver",))  # fmt: skip
    async with httpx.AsyncClient(base_url=base_url, headers={"authorization": f"Bearer {token}"}, timeout=10) as http:
        body = {"version": card.version, "args_hash": card.args_hash}
        answer = await http.post(f"/admin/api/cards/{card_id}/approve", json=body)
    assert answer.status_code == 200, answer.text
