"""Orders and refunds: the read tools of the orders backend.

Customer names and customer notes are third-party text (`Untrusted`); the model sees the order's
facts (items, amounts, status) and that a note exists, never its words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from adapters._upstream import path, request_json
from gateway.context import ToolContext
from gateway.tool import Access, Mode, Tool
from gateway.untrusted import WITHHELD, Untrusted

__all__ = ["TOOLS"]


class OrderArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    order_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$", description="Order id, e.g. ord-1001.")


class Item(BaseModel):
    sku: str
    name: str
    quantity: int
    unit_cents: int


class Order(BaseModel):
    order_id: str
    customer: Untrusted
    items: list[Item]
    total_cents: int
    currency: str
    status: str
    placed_at: str
    refunded_cents: int = 0
    customer_note: Untrusted | None = None


class Eligibility(BaseModel):
    order_id: str
    eligible: bool
    max_refundable_cents: int
    reason: str = Field(pattern=r"^[a-z_]{1,40}$")


async def _get_order(args: OrderArgs, ctx: ToolContext) -> Any:
    return await request_json(ctx, "GET", path("/orders/{order_id}", order_id=args.order_id))


async def _eligibility(args: OrderArgs, ctx: ToolContext) -> Any:
    return await request_json(ctx, "GET", path("/orders/{order_id}/refund-eligibility", order_id=args.order_id))


def _order_for_model(order: Order) -> Mapping[str, Any]:
    view = order.model_dump(mode="json", exclude={"customer", "customer_note"})
    view["has_customer_note"] = order.customer_note is not None
    return view


def _order_for_people(order: Order) -> str:
    lines = [
        f"Order {order.order_id} for {order.customer}: {order.status}, placed {order.placed_at}",
        f"  total {order.total_cents / 100:.2f} {order.currency}, refunded {order.refunded_cents / 100:.2f}",
    ]
    lines += [f"  {i.quantity} x {i.name} ({i.sku}) @ {i.unit_cents / 100:.2f}" for i in order.items]
    if order.customer_note not in (None, WITHHELD):
        lines.append(f"  customer note: {order.customer_note}")
    return "\n".join(lines)


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="orders_get",
        adapter="orders",
        title="Get an order",
        description="Get one order of the caller's organisation: items, amounts, status and refunds so far.",
        mode=Mode.READ,
        arguments=OrderArgs,
        output=Order,
        access=Access.roles("staff", "support"),
        execute=_get_order,
        model_view=_order_for_model,
        human_view=_order_for_people,
        emits_untrusted_text=True,
    ),
    Tool(
        name="orders_refund_eligibility",
        adapter="orders",
        title="Refund eligibility",
        description="Check whether an order can be refunded and the largest amount that can be refunded.",
        mode=Mode.READ,
        arguments=OrderArgs,
        output=Eligibility,
        access=Access.roles("support"),
        execute=_eligibility,
    ),
)
