"""Batch decisions (``POST /admin/api/cards/decisions``) on the real gateway under uvicorn, over a real Redis."""

from __future__ import annotations

import secrets
from dataclasses import replace
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from gateway.card import CardState
from gateway.limits import Limits
from gateway.principal import KeyKind
from gateway.store.audit import RedisStreamAuditSink
from gateway.store.ledger import RedisLedger
from tests.support.agents import make_key
from tests.support.cards import PROPOSAL

pytestmark = pytest.mark.anyio


async def _card(redis: Redis, **changes: Any) -> str:
    created = await RedisLedger(redis).propose(replace(PROPOSAL, dedupe_key=secrets.token_hex(8), **changes))
    assert created.card is not None
    return created.card.card_id


async def _decide(mcp_url: str, key: str, decisions: list[dict[str, Any]]) -> httpx.Response:
    base = mcp_url.removesuffix("/mcp")
    async with httpx.AsyncClient(base_url=f"{base}/admin/api", timeout=10) as http:
        return await http.post("/cards/decisions", json={"decisions": decisions},
                               headers={"authorization": f"Bearer {key}"})  # fmt: skip


def _approve(card_id: str, version: int = 1, args_hash: str = "h1") -> dict[str, Any]:
    return {"card_id": card_id, "decision": "approve", "version": version, "args_hash": args_hash}


async def test_a_mixed_batch_decides_each_card_on_its_own_and_audits_each(mcp_url: str, redis: Redis) -> None:
    """A fine card is approved, one reviewed at an older version and one already decided are refused with
    CONFLICT, a reject binds to its version: one result per card, in order, and one audit event per card."""
    key = await make_key(redis, kind=KeyKind.ADMIN, subject="bob@acme.example", roles=("approver",))
    fine, decided, vetoed = [await _card(redis) for _ in range(3)]
    # `stale` moved on since it was reviewed at version 1 (a first approval of two), `decided` was rejected.
    stale = await _card(redis, approvals_required=2)
    ledger = RedisLedger(redis)
    assert (await ledger.approve(stale, approver="carol@acme.example", version=1, args_hash="h1", comment="")).ok
    assert (await ledger.reject(decided, admin="carol@acme.example", reason="no")).ok
    answer = await _decide(mcp_url, key, [
        _approve(fine), _approve(stale), _approve(decided),
        {"card_id": vetoed, "decision": "reject", "version": 1, "args_hash": "h1", "reason": "not this week"},
    ])  # fmt: skip
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [(r["card_id"], r["code"]) for r in body["results"]] == [
        (fine, "OK"), (stale, "CONFLICT"), (decided, "CONFLICT"), (vetoed, "OK"),
    ]  # fmt: skip
    assert [(r["state"], r["version"]) for r in body["results"]] == [
        ("APPROVED", 2), ("PENDING", 2), ("REJECTED", 2), ("REJECTED", 2),
    ]  # fmt: skip
    assert body["message"] == "4 decisions: 2 done, 2 refused"
    stale_now = await ledger.get(stale)
    assert stale_now is not None and stale_now.approvers == ("carol@acme.example",)
    audit = [(e.action, e.code, e.extra.get("card_id")) for e in await RedisStreamAuditSink(redis).recent(50)
             if e.action in ("card.approve", "card.reject", "card.batch")]  # fmt: skip
    assert audit == [
        ("card.approve", "", fine), ("card.approve", "CONFLICT", stale), ("card.approve", "CONFLICT", decided),
        ("card.reject", "", vetoed), ("card.batch", "", None),
    ]  # fmt: skip


async def test_a_reject_in_a_batch_is_bound_to_the_version_reviewed(mcp_url: str, redis: Redis) -> None:
    """A rejection naming a version the card no longer has changes nothing: the card stays as the other
    approver left it."""
    key = await make_key(redis, kind=KeyKind.ADMIN, subject="bob@acme.example", roles=("approver",))
    card_id = await _card(redis, approvals_required=2)
    ledger = RedisLedger(redis)
    assert (await ledger.approve(card_id, approver="carol@acme.example", version=1, args_hash="h1", comment="")).ok
    answer = await _decide(mcp_url, key, [
        {"card_id": card_id, "decision": "reject", "version": 1, "args_hash": "h1", "reason": "no"},
    ])  # fmt: skip
    assert [r["code"] for r in answer.json()["results"]] == ["CONFLICT"]
    card = await ledger.get(card_id)
    assert card is not None and card.state is CardState.PENDING and card.version == 2


@pytest.mark.parametrize(
    ("size", "twice", "problem"),
    [
        (Limits().batch_decisions + 1, False, "at most 50 cards per batch ([limits] batch_decisions), got 51"),
        (0, False, "name at least one card"),
        (2, True, "each card once"),
    ],
)
async def test_a_batch_too_long_empty_or_naming_a_card_twice_is_refused_whole_and_audited(
    mcp_url: str, redis: Redis, size: int, twice: bool, problem: str
) -> None:
    """The list is refused with VALIDATION_ERROR naming the problem, before any card is touched."""
    key = await make_key(redis, kind=KeyKind.ADMIN, subject="bob@acme.example", roles=("approver",))
    first = await _card(redis)
    ids = [first] * size if twice else [first, *(f"crd_1_{index:032x}" for index in range(size - 1))][:size]
    answer = await _decide(mcp_url, key, [_approve(card_id) for card_id in ids])
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["code"] == "VALIDATION_ERROR" and any(problem in p for p in error["problems"])
    card = await RedisLedger(redis).get(first)
    assert card is not None and card.state is CardState.PENDING and card.version == 1
    refused = [e for e in await RedisStreamAuditSink(redis).recent(20) if e.action == "card.batch"]
    assert [(e.outcome, e.code) for e in refused] == [("deny", "VALIDATION_ERROR")]


async def test_a_reject_without_a_reason_refuses_only_itself(mcp_url: str, redis: Redis) -> None:
    """Each decision is checked as it would be alone: an empty reason is that item's VALIDATION_ERROR."""
    key = await make_key(redis, kind=KeyKind.ADMIN, subject="bob@acme.example", roles=("approver",))
    fine, unexplained = await _card(redis), await _card(redis)
    answer = await _decide(mcp_url, key, [
        _approve(fine), {"card_id": unexplained, "decision": "reject", "version": 1, "args_hash": "h1"},
    ])  # fmt: skip
    assert [r["code"] for r in answer.json()["results"]] == ["OK", "VALIDATION_ERROR"]
