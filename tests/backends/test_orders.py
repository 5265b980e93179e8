"""The orders service over real HTTP: org scoping, refund eligibility, idempotent refunds, faults wiring."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import httpx
import pytest

from backends import OrdersService, create_orders_app
from backends.demo_data import HOSTILE_NOTE
from tests.support.services import TEST_SIGNING_KEY, signed_identity

if TYPE_CHECKING:
    from conftest import Running

pytestmark = pytest.mark.anyio

ALICE = signed_identity("alice@acme.example", "acme", audience="orders", key=TEST_SIGNING_KEY)
BOB = signed_identity("bob@acme.example", "acme", audience="orders", key=TEST_SIGNING_KEY)
HANK = signed_identity("hank@globex.example", "globex", audience="orders", key=TEST_SIGNING_KEY)
GOODWILL = {"amount_cents": 2_500, "reason": "Goodwill"}


def key(value: str) -> dict[str, str]:
    return {"Idempotency-Key": value}


async def test_request_without_the_service_token_is_refused_401(orders: Running[OrdersService]) -> None:
    """Orders checks the gateway's bearer token like rooms does."""
    async with httpx.AsyncClient(base_url=orders.url) as anonymous:
        response = await anonymous.get("/orders/ord-1001", headers=ALICE)
    assert (response.status_code, response.json()) == (401, {"error": "unauthorized"})


async def test_own_order_is_shown_with_what_was_refunded(orders: Running[OrdersService]) -> None:
    """An order of the caller's org comes back whole, with ``refunded_cents`` summed from its refunds."""
    response = await orders.client.get("/orders/ord-1001", headers=BOB)
    assert response.json() == {
        "order_id": "ord-1001",
        "org": "acme",
        "customer": "Acme Facilities",
        "items": [
            {"sku": "desk-std", "name": "Standing desk", "quantity": 1, "unit_cents": 45_000},
            {"sku": "cable-usbc", "name": "USB-C cable", "quantity": 5, "unit_cents": 1_200},
        ],
        "total_cents": 51_000,
        "currency": "USD",
        "status": "delivered",
        "placed_at": "2026-11-20",
        "customer_note": "Deliver to loading dock B.",
        "refunded_cents": 11_000,
    }


async def test_hostile_customer_note_is_returned_verbatim(orders: Running[OrdersService]) -> None:
    """The backend does not sanitise free text; fencing it is the gateway's job."""
    response = await orders.client.get("/orders/ord-1002", headers=ALICE)
    assert response.json()["customer_note"] == HOSTILE_NOTE


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/orders/{id}", None),
        ("GET", "/orders/{id}/refund-eligibility", None),
        ("GET", "/orders/{id}/refunds", None),
        ("POST", "/orders/{id}/refunds", GOODWILL),
    ],
)
async def test_another_orgs_order_answers_exactly_like_a_missing_one(
    orders: Running[OrdersService], method: str, path: str, body: dict[str, Any] | None
) -> None:
    """For acme, globex's ``ord-1005`` is byte-for-byte ``ord-9999``, and a refund on it applies nothing."""
    theirs = await orders.client.request(method, path.format(id="ord-1005"), json=body, headers=ALICE | key("k1"))
    missing = await orders.client.request(method, path.format(id="ord-9999"), json=body, headers=ALICE | key("k2"))
    assert (theirs.status_code, theirs.json()) == (404, {"error": "not_found"})
    assert (theirs.headers["content-type"], theirs.content) == (missing.headers["content-type"], missing.content)
    assert len(orders.service.refunds) == 2


@pytest.mark.parametrize(
    ("order_id", "eligible", "max_refundable_cents", "reason"),
    [
        ("ord-1001", True, 40_000, "ok"),
        ("ord-1002", True, 37_000, "ok"),
        ("ord-1003", False, 0, "cancelled"),
        ("ord-1004", False, 0, "window_closed"),
    ],
)
async def test_refund_eligibility_gives_the_limit_and_a_machine_reason(
    orders: Running[OrdersService], order_id: str, eligible: bool, max_refundable_cents: int, reason: str
) -> None:
    """Eligibility accounts for refunds already issued, cancellation and the refund window."""
    response = await orders.client.get(f"/orders/{order_id}/refund-eligibility", headers=ALICE)
    assert response.json() == {
        "order_id": order_id,
        "eligible": eligible,
        "max_refundable_cents": max_refundable_cents,
        "reason": reason,
    }


async def test_refund_twice_with_one_key_is_issued_once_and_replayed(orders: Running[OrdersService]) -> None:
    """The retry returns the same 201 and refund, marked as replayed, and money moves once."""
    first = await orders.client.post("/orders/ord-1001/refunds", json=GOODWILL, headers=ALICE | key("r1"))
    again = await orders.client.post("/orders/ord-1001/refunds", json=GOODWILL, headers=ALICE | key("r1"))
    order = (await orders.client.get("/orders/ord-1001", headers=ALICE)).json()
    assert (first.status_code, first.json()) == (
        201,
        {
            "refund_id": "ref-5003",
            "order_id": "ord-1001",
            "amount_cents": 2_500,
            "currency": "USD",
            "reason": "Goodwill",
            "status": "issued",
        },
    )
    assert (again.status_code, again.content, again.headers["idempotent-replayed"]) == (201, first.content, "true")
    assert order["refunded_cents"] == 11_000 + 2_500


async def test_reusing_a_key_for_another_amount_is_refused_422(orders: Running[OrdersService]) -> None:
    """A different amount under a used key is a conflict, never a second refund."""
    await orders.client.post("/orders/ord-1001/refunds", json=GOODWILL, headers=ALICE | key("r1"))
    response = await orders.client.post(
        "/orders/ord-1001/refunds", json=GOODWILL | {"amount_cents": 9_999}, headers=ALICE | key("r1")
    )
    assert (response.status_code, response.json()) == (422, {"error": "idempotency_key_reused"})
    assert len(orders.service.refunds) == 3


async def test_refund_above_what_remains_is_refused_and_remembered(orders: Running[OrdersService]) -> None:
    """409 ``exceeds_refundable`` is a decision: the key lookup says refused and nothing was issued."""
    too_much = {"amount_cents": 40_001, "reason": "Everything"}
    response = await orders.client.post("/orders/ord-1001/refunds", json=too_much, headers=ALICE | key("r1"))
    lookup = await orders.client.get("/idempotency/r1", headers=ALICE)
    assert (response.status_code, response.json()) == (409, {"error": "exceeds_refundable"})
    assert lookup.json() == {
        "key": "r1",
        "state": "refused",
        "status_code": 409,
        "response": {"error": "exceeds_refundable"},
    }
    assert len(orders.service.refunds) == 2


@pytest.mark.parametrize("order_id", ["ord-1003", "ord-1004"])
async def test_refund_of_an_ineligible_order_is_refused_not_eligible(
    orders: Running[OrdersService], order_id: str
) -> None:
    """Cancelled orders and orders past the window get 409 ``not_eligible``."""
    response = await orders.client.post(f"/orders/{order_id}/refunds", json=GOODWILL, headers=ALICE | key("r1"))
    assert (response.status_code, response.json()) == (409, {"error": "not_eligible"})
    assert len(orders.service.refunds) == 2


async def test_refunding_the_rest_leaves_the_order_fully_refunded(orders: Running[OrdersService]) -> None:
    """After refunding exactly what remains, eligibility says ``fully_refunded`` and further refunds are refused."""
    rest = {"amount_cents": 40_000, "reason": "Returned"}
    issued = await orders.client.post("/orders/ord-1001/refunds", json=rest, headers=ALICE | key("r1"))
    eligibility = (await orders.client.get("/orders/ord-1001/refund-eligibility", headers=ALICE)).json()
    more = await orders.client.post("/orders/ord-1001/refunds", json=GOODWILL, headers=ALICE | key("r2"))
    assert issued.status_code == 201
    assert (eligibility["eligible"], eligibility["max_refundable_cents"], eligibility["reason"]) == (
        False,
        0,
        "fully_refunded",
    )
    assert (more.status_code, more.json()) == (409, {"error": "not_eligible"})


@pytest.mark.parametrize(
    "body",
    [
        {"amount_cents": 0, "reason": "x"},
        {"amount_cents": -5, "reason": "x"},
        {"amount_cents": "100", "reason": "x"},
        {"amount_cents": True, "reason": "x"},
        {"amount_cents": 10.5, "reason": "x"},
        {"amount_cents": 100},
        {"amount_cents": 100, "reason": ""},
        {"amount_cents": 100, "reason": "x", "approve": True},
    ],
)
async def test_malformed_refund_is_refused_400_and_not_remembered(
    orders: Running[OrdersService], body: dict[str, Any]
) -> None:
    """Amounts must be positive integers and a reason is required; the key stays free for a corrected request."""
    response = await orders.client.post("/orders/ord-1001/refunds", json=body, headers=ALICE | key("r1"))
    lookup = await orders.client.get("/idempotency/r1", headers=ALICE)
    assert (response.status_code, response.json()) == (400, {"error": "invalid_request"})
    assert lookup.json()["state"] == "unknown"
    assert len(orders.service.refunds) == 2


async def test_refund_list_shows_existing_and_new_refunds_of_the_order(orders: Running[OrdersService]) -> None:
    """``GET /orders/{id}/refunds`` lists the order's refunds in the order they were issued."""
    await orders.client.post("/orders/ord-1001/refunds", json=GOODWILL, headers=ALICE | key("r1"))
    response = await orders.client.get("/orders/ord-1001/refunds", headers=ALICE)
    listed = response.json()
    assert listed["order_id"] == "ord-1001"
    assert [(r["refund_id"], r["amount_cents"]) for r in listed["refunds"]] == [
        ("ref-5001", 6_000),
        ("ref-5002", 5_000),
        ("ref-5003", 2_500),
    ]


async def test_the_same_key_in_two_orgs_issues_two_independent_refunds(orders: Running[OrdersService]) -> None:
    """Keys are per org, so globex using acme's key neither replays nor conflicts."""
    ours = await orders.client.post("/orders/ord-1001/refunds", json=GOODWILL, headers=ALICE | key("shared"))
    theirs = await orders.client.post("/orders/ord-1005/refunds", json=GOODWILL, headers=HANK | key("shared"))
    assert (ours.status_code, theirs.status_code) == (201, 201)
    assert "idempotent-replayed" not in theirs.headers
    assert theirs.json()["currency"] == "EUR"


async def test_dropped_refund_answer_is_found_applied_by_key(orders: Running[OrdersService]) -> None:
    """Orders shares the fault switch: a refund whose answer was cut is issued once and reported applied."""
    fault = {"drop_after_commit": True, "paths": ["/orders/ord-1001/refunds"], "times": 1}
    assert (await orders.client.put("/_faults", json=fault)).status_code == 200
    with anyio.fail_after(5), pytest.raises(httpx.RemoteProtocolError):
        await orders.client.post("/orders/ord-1001/refunds", json=GOODWILL, headers=ALICE | key("r1"))
    lookup = await orders.client.get("/idempotency/r1", headers=ALICE)
    assert (lookup.json()["state"], lookup.json()["status_code"]) == ("applied", 201)
    assert len(orders.service.refunds) == 3


def test_an_empty_service_token_is_refused_at_construction() -> None:
    """An empty token would let any bearer in, so the factory refuses it."""
    with pytest.raises(ValueError):
        create_orders_app(service_token="", signing_key=TEST_SIGNING_KEY)
