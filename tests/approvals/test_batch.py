"""Batch decisions (``POST /admin/api/cards/decisions``) on the real gateway under uvicorn, over a real Redis."""

from __future__ import annotations

import secrets
from dataclasses import replace
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from gateway.approvals.batch import BatchItem, decide_batch
from gateway.approvals.service import CardService
from gateway.cards.card import CardState
from gateway.cards.views import ResultCode
from gateway.limits.budgets import Limits
from gateway.principal import KeyKind, Principal
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.agents import make_key
from tests.support.cards import PROPOSAL
from tests.support.examples import examples
from tests.support.guards import always_writable

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


# -- any list of decisions ------------------------------------------------------------------------

_SPEC = st.tuples(
    st.integers(min_value=0, max_value=4),  # which card (4: one that does not exist)
    st.sampled_from(["approve", "reject"]),
    st.sampled_from([0, 1]),  # versions behind the card's own
    st.booleans(),  # the right args_hash
)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.lists(_SPEC, max_size=7))
async def test_any_list_is_refused_whole_or_decided_card_by_card_as_each_alone_would_be(
    quiet_redis_url: str, specs: list[tuple[int, str, int, bool]]
) -> None:
    """Whatever the list: refused whole (empty, too long, a card twice) with no card touched; or one result
    per item, in order, OK exactly for the items naming an existing card at its version and hash, and every
    card then in the state its own decision leaves it."""
    client = Redis.from_url(quiet_redis_url)
    try:
        await client.flushdb()
        ledger = RedisLedger(client)
        ids = [await _card(client) for _ in range(4)] + ["crd_2_" + "f" * 32]
        service = CardService(
            ledger, RedisStreamAuditSink(client), writable=always_writable, changes=ledger.changes, batch_limit=5
        )
        bob = Principal(subject="bob@acme.example", org="acme", roles=frozenset({"approver"}), kind=KeyKind.ADMIN)
        items = [BatchItem(card_id=ids[card], decision=verb, version=1 - behind, args_hash="h1" if right else "h2",
                           reason="because") for card, verb, behind, right in specs]  # fmt: skip
        outcome = await decide_batch(service, RedisStreamAuditSink(client), bob, items)
        named = [item.card_id for item in items]
        cards = {card_id: await ledger.get(card_id) for card_id in ids[:4]}
        if not items or len(items) > 5 or len(set(named)) < len(named):
            assert outcome.code is ResultCode.VALIDATION_ERROR and outcome.results == ()
            assert all(card is not None and card.version == 1 for card in cards.values())
            return
        assert len(outcome.results) == len(items)
        for item, result in zip(items, outcome.results, strict=True):
            fine = item.card_id != ids[4] and item.version == 1 and item.args_hash == "h1"
            assert result.ok is fine, (item, result.code)
            if item.card_id in cards:
                card = cards[item.card_id]
                assert card is not None
                decided = {"approve": CardState.APPROVED, "reject": CardState.REJECTED}[item.decision]
                assert card.state is (decided if fine else CardState.PENDING)
    finally:
        await client.flushdb()
        await client.aclose()
