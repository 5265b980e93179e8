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

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import ConfigDict, Field, TypeAdapter, with_config
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from backends._common import ServiceState, build_service_app
from backends._http import Caller, caller_of, not_found
from backends._idempotency import Clock, Outcome, idempotent_write
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
        self._next_number = 5001 + len(self.refunds)
        self.load_saved()

    def business_state(self) -> dict[str, Any]:
        return {"refunds": [asdict(refund) for refund in self.refunds]}

    def restore_business_state(self, state: Mapping[str, Any]) -> None:
        self.refunds = [Refund(**raw) for raw in state["refunds"]]
        self._next_number = 5001 + len(self.refunds)

    def owned_order(self, caller: Caller, order_id: str) -> Order | None:
        order = self.orders.get(order_id)
        return order if order is not None and order.org == caller.org else None

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
        order = self.owned_order(caller, params["order_id"])
        if order is None:
            return Outcome.refused(404, "not_found")
        eligibility = self.eligibility(order)
        if not eligibility.eligible:
            return Outcome.refused(409, "not_eligible")
        if args.amount_cents > eligibility.max_refundable_cents:
            return Outcome.refused(409, "exceeds_refundable")
        refund = Refund(
            refund_id=self._new_id(), order_id=order.order_id, amount_cents=args.amount_cents, reason=args.reason
        )
        self.refunds.append(refund)
        return Outcome(status_code=201, body=_refund_json(refund, order))

    def _new_id(self) -> str:
        taken = {refund.refund_id for refund in self.refunds}
        while (refund_id := f"ref-{self._next_number}") in taken:
            self._next_number += 1
        self._next_number += 1
        return refund_id


def create_orders_app(
    *,
    service_token: str,
    signing_key: str,
    audience: str = "orders",
    data: OrdersData | None = None,
    key_ttl_seconds: float = 86400.0,
    clock: Clock = time.monotonic,
    state_file: Path | None = None,
    jwks_url: str | None = None,
) -> Starlette:
    """Build an orders service with its own copy of ``data`` (the demo data by default).

    With ``state_file``, the refunds and idempotency records saved there replace the seed refunds,
    and every write saves them again before it answers.

    ``signing_key`` checks the identity the gateway signs for each caller, for audience ``audience`` (the
    adapter's name); a request whose identity it does not verify reaches no route. With ``jwks_url``
    (the gateway's ``/.well-known/jwks.json``) identities may be signed with the gateway's keys and
    every write needs the gateway's approval receipt for it (``backends._gateway_keys``).
    ``clock`` is monotonic seconds and only ages idempotency keys; tests pass a fake one.
    The state is ``app.state.service``, an :class:`OrdersService`.
    """
    service = OrdersService(
        data=demo_orders_data() if data is None else data,
        key_ttl_seconds=key_ttl_seconds,
        clock=clock,
        state_file=None if state_file is None else StateFile(state_file),
    )

    def owned(request: Request) -> Order | None:
        return service.owned_order(caller_of(request), request.path_params["order_id"])

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

    refunds_write = idempotent_write(service.idempotency, _NEW_REFUND, service.refund, after=service.save)
    routes = [
        Route("/orders/{order_id}", get_order, methods=["GET"]),
        Route("/orders/{order_id}/refund-eligibility", refund_eligibility, methods=["GET"]),
        Route("/orders/{order_id}/refunds", list_refunds, methods=["GET"]),
        Route("/orders/{order_id}/refunds", refunds_write, methods=["POST"]),
    ]
    return build_service_app(
        service=service,
        service_token=service_token,
        signing_key=signing_key,
        audience=audience,
        routes=routes,
        jwks_url=jwks_url,
    )


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
