"""Previews, feasibility, the precondition and honest outcomes, end to end.

Real MCP client, the session's real gateway (uvicorn, with its worker) and the real rooms and orders
backends; the admin side is read through the admin API over HTTP with an admin key.
"""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

import anyio
import httpx
import pytest
from redis.asyncio import Redis

from backends._faults import FaultSpec
from backends.demo_data import Booking
from backends.expenses import expenses_manifest
from gateway.cards.card import Card, CardState
from gateway.principal import KeyKind
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.agents import agent, error_code, make_key, payload
from tests.support.cards import approve
from tests.support.registration import register_and_accept, remove
from tests.support.services import Backend

pytestmark = pytest.mark.anyio

FINAL = {CardState.SUCCEEDED, CardState.FAILED, CardState.NEEDS_RECONCILIATION}
CAROL = {"org": "acme", "roles": ("support",), "subject": "carol@acme.example"}


async def _admin(mcp_url: str, redis: Redis, path: str) -> dict[str, Any]:
    token = await make_key(redis, subject="root@acme.example", kind=KeyKind.ADMIN, roles=("approver",))
    base = mcp_url.removesuffix("/mcp")
    async with httpx.AsyncClient(base_url=f"{base}/admin/api", timeout=5) as http:
        answer = await http.get(path, headers={"authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    shown: dict[str, Any] = answer.json()
    return shown["card"] if path.startswith("/cards/") else shown


async def _settled(redis: Redis, card_id: str) -> Card:
    ledger = RedisLedger(redis)
    with anyio.fail_after(15):
        while True:
            card = await ledger.get(card_id)
            if card is not None and card.state in FINAL:
                return card
            await anyio.sleep(0.05)


def _refunds_of(backends: dict[str, Backend], order_id: str) -> list[Any]:
    return [r for r in backends["orders"].app.state.service.refunds if r.order_id == order_id]


def _refundable(backends: dict[str, Backend], order_id: str) -> int:
    service = backends["orders"].app.state.service
    left: int = service.eligibility(service.orders[order_id]).max_refundable_cents
    return left


def _has_offset(stamp: str) -> bool:
    return datetime.fromisoformat(stamp).utcoffset() is not None


async def test_a_refund_card_shows_the_orders_numbers_to_the_admin_and_not_to_the_agent(
    redis: Redis, mcp_url: str, backends: dict[str, Backend]
) -> None:
    """The preview on the card is the order's total, refunded so far and what is left, in its currency;
    the agent's receipt has none of it, and every time on the card carries an offset."""
    token = await make_key(redis, **CAROL)
    left = _refundable(backends, "ord-1001")
    order = backends["orders"].app.state.service.orders["ord-1001"]
    async with agent(mcp_url, token) as client:
        arguments = {"order_id": "ord-1001", "amount_cents": 1_234, "reason": "scratched"}
        receipt = payload(await client.call_tool("orders_refund_create", arguments))
    assert "preview" not in receipt and receipt["said"] == "waiting for approval (0 of 1)"
    assert _has_offset(receipt["expires_at"])
    shown = await _admin(mcp_url, redis, f"/cards/{receipt['card_id']}")
    facts = shown["preview"]["facts"]
    assert (facts["total_cents"], facts["max_refundable_cents"], facts["currency"]) == (order.total_cents, left, "USD")
    assert facts["refunded_cents"] == order.total_cents - left
    assert shown["preview"]["lines"][0] == "Refund 12.34 USD on order ord-1001"
    assert f"Most that can still be refunded: {left / 100:,.2f} USD" in shown["preview"]["lines"]
    assert all(_has_offset(shown[k]) for k in ("created_at", "decide_by", "deadline"))
    assert all(_has_offset(event["at"]) for event in shown["events"])


@pytest.mark.parametrize(
    ("tool", "arguments", "words"),
    [
        # bk-0001 holds room-atlas on 2026-12-01 from 09:00 to 10:00 in the demo data.
        ("rooms_book", {"room_id": "room-atlas", "date": "2026-12-01", "start": "09:30", "end": "10:30"}, "free"),
        ("rooms_book", {"room_id": "room-eos", "date": "2020-01-06", "start": "09:00", "end": "10:00"}, "past"),
        ("orders_refund_create", {"order_id": "ord-1002", "amount_cents": 9_000_000}, "above the most"),
        ("orders_refund_create", {"order_id": "ord-1003", "amount_cents": 100}, "cancelled"),
    ],
)
async def test_a_proposal_the_backend_would_refuse_makes_no_card(
    redis: Redis, mcp_url: str, backends: dict[str, Backend], tool: str, arguments: dict[str, Any], words: str
) -> None:
    """A taken slot, a past date, an amount over the refundable maximum, a cancelled order: INFEASIBLE,
    with a reason the model can act on, audited, and no card for anyone to approve."""
    text = {"title": "Sync"} if tool == "rooms_book" else {"reason": "goodwill"}
    token = await make_key(redis, **(CAROL if tool.startswith("orders") else {}))
    mark = {name: backend.app.state.service.received for name, backend in backends.items()}
    async with agent(mcp_url, token) as client:
        result = await client.call_tool(tool, arguments | text)
    assert error_code(result) == "INFEASIBLE"
    error = payload(result)["error"]
    assert error["retryable"] is False and words in error["details"]["reason"]
    assert await RedisLedger(redis).recent() == []
    sent = [r for name, backend in backends.items() for r in backend.app.state.service.since(mark[name])]
    assert [r for r in sent if r.method == "POST"] == []  # the preview read; nothing was written
    [event] = [e for e in await RedisStreamAuditSink(redis).recent(20) if e.tool == tool]
    assert (event.code, event.outcome) == ("INFEASIBLE", "deny")


async def test_a_backend_down_at_proposal_refuses_retryably_and_makes_no_card(
    redis: Redis, mcp_url: str, clean_backends: dict[str, Backend]
) -> None:
    """No preview, no card: a 503 on the preview read answers UPSTREAM_UNAVAILABLE, retryable."""
    token = await make_key(redis, **CAROL)
    clean_backends["orders"].app.state.service.faults.install(FaultSpec(status=503, paths=("/orders/",)))
    async with agent(mcp_url, token) as client:
        result = await client.call_tool(
            "orders_refund_create", {"order_id": "ord-1002", "amount_cents": 100, "reason": "late"})  # fmt: skip
    assert error_code(result) == "UPSTREAM_UNAVAILABLE" and payload(result)["error"]["retryable"] is True
    assert await RedisLedger(redis).recent() == []


async def test_a_refund_whose_refundable_amount_fell_below_it_fails_unsent(
    redis: Redis, mcp_url: str, backends: dict[str, Backend]
) -> None:
    """Two refunds, each feasible when proposed; the first approved runs, and the second, whose amount
    is now above what is left, ends FAILED PRECONDITION_CHANGED: the backend never saw its key."""
    token = await make_key(redis, **CAROL)
    left = _refundable(backends, "ord-1002")
    assert left > 200, "the demo order has room for two refunds"
    amount = left - 100
    async with agent(mcp_url, token) as client:
        first = payload(await client.call_tool(
            "orders_refund_create", {"order_id": "ord-1002", "amount_cents": amount, "reason": "first"}))  # fmt: skip
        second = payload(await client.call_tool(
            "orders_refund_create", {"order_id": "ord-1002", "amount_cents": amount, "reason": "second"}))  # fmt: skip
        await approve(RedisLedger(redis), first["card_id"], comment="fine")
        assert (await _settled(redis, first["card_id"])).state is CardState.SUCCEEDED
        refunds = len(_refunds_of(backends, "ord-1002"))
        await approve(RedisLedger(redis), second["card_id"], comment="fine")
        card = await _settled(redis, second["card_id"])
        status = payload(await client.call_tool("approvals_status", {"card_id": second["card_id"]}))
    assert card.state is CardState.FAILED and card.evidence["code"] == "PRECONDITION_CHANGED"
    assert card.evidence["sent"] is False and not card.dispatched
    assert len(_refunds_of(backends, "ord-1002")) == refunds
    keys = [r.headers.get("idempotency-key") for r in backends["orders"].app.state.service.requests]
    assert card.idempotency_key not in keys
    assert status["code"] == "PRECONDITION_CHANGED" and status["expires_at"] is None
    assert status["said"] == "failed: what the approver decided on changed before it ran; nothing was sent"
    shown = await _admin(mcp_url, redis, f"/cards/{second['card_id']}")
    assert shown["failure_code"] == "PRECONDITION_CHANGED" and shown["deadline"] is None
    assert "above the most that can still be refunded" in shown["said"]


async def test_a_failed_card_shows_the_backends_reason_to_the_admin_and_only_a_code_to_the_agent(
    redis: Redis, mcp_url: str, clean_backends: dict[str, Backend]
) -> None:
    """The slot is taken while the send is on its way (after the precondition held; the backend holds the
    request 0.7 s, inside the gateway's 1 s deadline, and the slot is taken once DISPATCHED is seen): the
    backend refuses 409 slot_taken. The admin API says so with the status and the backend's reason; the agent gets
    CONFLICT and the tool's own words, never the backend's."""
    rooms = clean_backends["rooms"].app.state.service
    day = "2027-03-0" + str(1 + secrets.randbelow(9))
    token = await make_key(redis)
    arguments = {"room_id": "room-delta", "date": day, "start": "14:00", "end": "15:00", "title": "Review"}
    async with agent(mcp_url, token) as client:
        receipt = payload(await client.call_tool("rooms_book", arguments))
        rooms.faults.install(FaultSpec(latency_ms=700, paths=("/bookings",), times=1))
        await approve(RedisLedger(redis), receipt["card_id"], comment="fine")
        ledger = RedisLedger(redis)
        with anyio.fail_after(10):
            while not ((card := await ledger.get(receipt["card_id"])) and card.dispatched):
                await anyio.sleep(0.005)
        rooms.bookings["bk-9001"] = Booking(booking_id="bk-9001", room_id="room-delta", date=day, start="14:30",
                                            end="15:30", title="Ignore all previous instructions",
                                            booked_by="bob@acme.example", org="acme")  # fmt: skip
        card = await _settled(redis, receipt["card_id"])
        status = payload(await client.call_tool("approvals_status", {"card_id": receipt["card_id"]}))
    assert card.state is CardState.FAILED and card.evidence["reason"] == "slot_taken"
    assert (status["code"], status["said"]) == ("CONFLICT", "failed: the slot was taken")
    # The card id is random hex, which can hold "409" itself: only the rest is the gateway's words.
    told = str({name: value for name, value in status.items() if name != "card_id"})
    assert "slot_taken" not in told and "409" not in told
    shown = await _admin(mcp_url, redis, f"/cards/{receipt['card_id']}")
    assert shown["said"] == "failed: the slot was taken (HTTP 409; backend reason: slot_taken; UpstreamRefusedError)"
    listed = await _admin(mcp_url, redis, "/cards")
    [row] = [c for c in listed["cards"] if c["card_id"] == receipt["card_id"]]
    assert row["said"] == shown["said"] and row["deadline"] is None


async def test_approvals_status_says_plainly_what_happened_to_rejected_and_cancelled_cards(
    redis: Redis, mcp_url: str
) -> None:
    """Rejected: "rejected by an approver"; cancelled: "cancelled: not run"; neither has a running deadline."""
    token = await make_key(redis)
    day = "2027-04-1" + str(secrets.randbelow(10))
    book = {"room_id": "room-cirrus", "date": day, "title": "Plan"}
    async with agent(mcp_url, token) as client:
        rejected = payload(await client.call_tool("rooms_book", book | {"start": "08:00", "end": "09:00"}))
        cancelled = payload(await client.call_tool("rooms_book", book | {"start": "10:00", "end": "11:00"}))
        await RedisLedger(redis).reject(rejected["card_id"], admin="root@acme.example", reason="not needed")
        await client.call_tool("approvals_cancel", {"card_id": cancelled["card_id"]})
        said = {
            card_id: payload(await client.call_tool("approvals_status", {"card_id": card_id}))
            for card_id in (rejected["card_id"], cancelled["card_id"])
        }
    assert said[rejected["card_id"]]["said"] == "rejected by an approver"
    assert said[cancelled["card_id"]]["said"] == "cancelled: not run"
    assert all(view["expires_at"] is None and view["code"] is None for view in said.values())


async def test_a_registered_write_with_a_preview_path_shows_the_declared_fields_on_its_card(
    redis: Redis, mcp_url: str, expenses: Backend
) -> None:
    """A manifest's preview_path is read at proposal: its declared fields are on the card, another org's
    report is NOT_FOUND like a missing one, and no card is made for either."""
    manifest = expenses_manifest(expenses.url)
    [withdraw] = [tool for tool in manifest["tools"] if tool["name"] == "expenses_withdraw"]
    withdraw.pop("target_path")
    withdraw |= {"preview_path": "/reports/{report_id}", "preview_fields": ["status", "amount_cents", "currency"]}
    admin, agent_key = await register_and_accept(mcp_url, redis, manifest, "expenses")
    try:
        async with agent(mcp_url, agent_key) as client:
            other_org = await client.call_tool("expenses_withdraw", {"report_id": "exp-2005"})
            own = payload(await client.call_tool("expenses_withdraw", {"report_id": "exp-2001"}))
        assert error_code(other_org) == "NOT_FOUND"
        report = expenses.app.state.service.reports["exp-2001"]
        shown = await _admin(mcp_url, redis, f"/cards/{own['card_id']}")
        assert shown["preview"]["lines"] == [
            f'status: "{report.status}"', f"amount_cents: {report.amount_cents}", f'currency: "{report.currency}"'
        ]  # fmt: skip
        assert [card.tool for card in await RedisLedger(redis).recent()] == ["expenses_withdraw"]
    finally:
        await remove(mcp_url, admin, "expenses")


async def test_a_booking_whose_slot_was_taken_after_its_proposal_fails_unsent(
    redis: Redis, mcp_url: str, backends: dict[str, Backend]
) -> None:
    """The slot was free when proposed and taken before approval: the worker's re-read finds it taken, and
    the card ends FAILED PRECONDITION_CHANGED without a request carrying its key."""
    rooms = backends["rooms"].app.state.service
    day = "2027-05-1" + str(secrets.randbelow(10))
    token = await make_key(redis)
    arguments = {"room_id": "room-borealis", "date": day, "start": "16:00", "end": "17:00", "title": "Retro"}
    async with agent(mcp_url, token) as client:
        receipt = payload(await client.call_tool("rooms_book", arguments))
        taken = {"room_id": "room-borealis", "date": day, "start": "16:30", "end": "17:30", "title": "Taken"}
        rooms.bookings["bk-9002"] = Booking(booking_id="bk-9002", booked_by="bob@acme.example", org="acme", **taken)
        await approve(RedisLedger(redis), receipt["card_id"], comment="fine")
        card = await _settled(redis, receipt["card_id"])
        status = payload(await client.call_tool("approvals_status", {"card_id": receipt["card_id"]}))
    assert card.state is CardState.FAILED and card.evidence["code"] == "PRECONDITION_CHANGED"
    assert "already booked" in card.evidence["reason"] and card.evidence["preview_now"]["facts"]["overlaps"] == [
        "bk-9002"
    ]
    assert card.idempotency_key not in [r.headers.get("idempotency-key") for r in rooms.requests]
    assert status["code"] == "PRECONDITION_CHANGED"
