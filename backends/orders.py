"""The orders service: each org's orders and the refunds issued against them.

Every order belongs to one org; to any other org it does not exist, and neither do its refunds or its
refund eligibility. Customer notes are free text and may be hostile.

Refund rules, checked in this order (the first that applies is the ``reason``):

* ``cancelled``: a cancelled order is never refunded;
* ``fully_refunded``: nothing is left once refunds reach the order total;
* ``window_closed``: refunds close ``refund_window_days`` after ``placed_at``, measured against the
  data's fixed ``today`` so the demo answers the same on any day;
* otherwise ``ok``, up to the total minus what was already refunded.

``POST /orders/{id}/refunds`` follows the idempotency contract of ``backends._idempotency``; its refusals
(``not_eligible``, ``exceeds_refundable``, ``not_found``) are remembered.
Auth, identity headers, faults and the request log are the service shell's (``backends._common``).
Given a ``state_file``, the refunds and idempotency records outlive the process (``backends._persist``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import date, timedelta
from functools import partial
from typing import Annotated, Any, Unpack

from pydantic import ConfigDict, Field, TypeAdapter, with_config
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from backends._common import ServiceOptions, ServiceState, build_service_app, in_callers_org, next_free_id
from backends._http import Caller, caller_of, not_found
from backends._idempotency import Clock, Outcome
from backends._persist import StateFile
from backends.demo_data import Order, OrdersData, Refund, demo_orders_data


@with_config(ConfigDict(extra="forbid"))
@dataclass(frozen=True, kw_only=True, slots=True)
class NewRefund:
    """Body of ``POST /orders/{order_id}/refunds``."""

    amount_cents: Annotated[int, Field(gt=0)]
    reason: Annotated[str, Field(min_length=1, max_length=500)]


@dataclass(frozen=True, kw_only=True, slots=True)
class Eligibility:
    """Whether an order can be refunded now, and how much at most (0 when it cannot)."""

    eligible: bool
    max_refundable_cents: int
    reason: str
    """``ok``, ``cancelled``, ``fully_refunded`` or ``window_closed``."""


class OrdersService(ServiceState):
    """The orders app's state: orders by id and every refund issued, plus the shared service state."""

    def __init__(
        self, *, data: OrdersData, key_ttl_seconds: float, clock: Clock, state_file: StateFile | None = None
    ) -> None:
        super().__init__(key_ttl_seconds=key_ttl_seconds, clock=clock, state_file=state_file)
        self.orders = {order.order_id: order for order in data.orders}
        self.refunds: list[Refund] = list(data.refunds)
        self._today = data.today
        self._window = timedelta(days=data.refund_window_days)
        self.load_saved()

    def business_state(self) -> dict[str, Any]:
        return {"refunds": [asdict(refund) for refund in self.refunds]}

    def restore_business_state(self, state: Mapping[str, Any]) -> None:
        self.refunds = [Refund(**raw) for raw in state["refunds"]]

    def refunds_of(self, order_id: str) -> list[Refund]:
        return [refund for refund in self.refunds if refund.order_id == order_id]

    def refunded_cents(self, order_id: str) -> int:
        return sum(refund.amount_cents for refund in self.refunds_of(order_id))

    def eligibility(self, order: Order) -> Eligibility:
        remaining = order.total_cents - self.refunded_cents(order.order_id)
        if order.status == "cancelled":
            return Eligibility(eligible=False, max_refundable_cents=0, reason="cancelled")
        if remaining <= 0:
            return Eligibility(eligible=False, max_refundable_cents=0, reason="fully_refunded")
        if date.fromisoformat(order.placed_at) + self._window < self._today:
            return Eligibility(eligible=False, max_refundable_cents=0, reason="window_closed")
        return Eligibility(eligible=True, max_refundable_cents=remaining, reason="ok")

    def refund(self, caller: Caller, params: Mapping[str, Any], args: NewRefund) -> Outcome:
        order = in_callers_org(self.orders, caller, params["order_id"])
        if order is None:
            return Outcome.refused(404, "not_found")
        eligibility = self.eligibility(order)
        if not eligibility.eligible:
            return Outcome.refused(409, "not_eligible")
        if args.amount_cents > eligibility.max_refundable_cents:
            return Outcome.refused(409, "exceeds_refundable")
        refund_id = next_free_id("ref-{}", first=5001, taken={refund.refund_id for refund in self.refunds})
        refund = Refund(
            refund_id=refund_id, order_id=order.order_id, amount_cents=args.amount_cents, reason=args.reason
        )
        self.refunds.append(refund)
        return Outcome(status_code=201, body=_refund_json(refund, order))


def create_orders_app(*, data: OrdersData | None = None, **options: Unpack[ServiceOptions]) -> Starlette:
    """Build an orders service from its own copy of ``data`` (the demo data by default), its refunds
    replaced by those a ``state_file`` holds; `options` are `build_service_app`'s (audience ``orders`` by default),
    and so is what it raises. ``app.state.service`` is an :class:`OrdersService`."""
    seed = demo_orders_data() if data is None else data
    return build_service_app(partial(OrdersService, data=seed), _routes, name="orders", **options)


def _routes(service: OrdersService) -> list[BaseRoute]:
    def owned(request: Request) -> Order | None:
        return in_callers_org(service.orders, caller_of(request), request.path_params["order_id"])

    async def get_order(request: Request) -> Response:
        order = owned(request)
        if order is None:
            return not_found()
        return JSONResponse(asdict(order) | {"refunded_cents": service.refunded_cents(order.order_id)})

    async def refund_eligibility(request: Request) -> Response:
        order = owned(request)
        if order is None:
            return not_found()
        return JSONResponse({"order_id": order.order_id, **asdict(service.eligibility(order))})

    async def list_refunds(request: Request) -> Response:
        order = owned(request)
        if order is None:
            return not_found()
        refunds = [_refund_json(refund, order) for refund in service.refunds_of(order.order_id)]
        return JSONResponse({"order_id": order.order_id, "refunds": refunds})

    return [
        Route("/orders/{order_id}", get_order, methods=["GET"]),
        Route("/orders/{order_id}/refund-eligibility", refund_eligibility, methods=["GET"]),
        Route("/orders/{order_id}/refunds", list_refunds, methods=["GET"]),
        Route("/orders/{order_id}/refunds", service.write_endpoint(_NEW_REFUND, service.refund), methods=["POST"]),
    ]


_NEW_REFUND = TypeAdapter(NewRefund)


def _refund_json(refund: Refund, order: Order) -> dict[str, Any]:
    return {
        "refund_id": refund.refund_id,
        "order_id": refund.order_id,
        "amount_cents": refund.amount_cents,
        "currency": order.currency,
        "reason": refund.reason,
        "status": refund.status,
    }
