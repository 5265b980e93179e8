"""Orders and refunds: the read tools of the orders backend, and issuing a refund as a write tool.

Customer names and customer notes are third-party text (`Untrusted`); the model sees the order's
facts (items, amounts, status) and that a note exists, never its words.

A refund only ever runs from an approved card, with the card's key as ``Idempotency-Key``; the
backend keeps a record per key, which `keyed_contract` reads when an answer was lost. Large refunds
need a second approver. The refund reason is the agent's own words, and no summary quotes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway import (
    WITHHELD,
    Access,
    Approval,
    Escalation,
    Mode,
    Tool,
    ToolContext,
    Untrusted,
    fill_path,
    keyed_contract,
    request_json,
)

__all__ = ["TOOLS"]


_ORDER_ID = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$", description="Order id, e.g. ord-1001.")


class OrderArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    order_id: str = _ORDER_ID


class RefundArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    order_id: str = _ORDER_ID
    amount_cents: int = Field(gt=0, le=10_000_000, description="Amount to refund, in cents of the order's currency.")
    reason: str = Field(min_length=1, max_length=200, description="Why the refund is due, shown to the approvers.")


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


class OrderForModel(BaseModel):
    """What the model is shown of an order: its facts, and only whether a customer note exists."""

    order_id: str
    items: list[Item]
    total_cents: int
    currency: str
    status: str
    placed_at: str
    refunded_cents: int
    has_customer_note: bool


class IssuedRefund(BaseModel):
    refund_id: str
    order_id: str
    amount_cents: int
    status: str


class Eligibility(BaseModel):
    order_id: str
    eligible: bool
    max_refundable_cents: int
    reason: Literal["ok", "cancelled", "fully_refunded", "window_closed"]
    """One of the codes this adapter knows; any other word from the backend fails the output check."""


async def _get_order(args: OrderArgs, ctx: ToolContext) -> Any:
    return await request_json(ctx, "GET", fill_path("/orders/{order_id}", order_id=args.order_id))


async def _order_exists(args: RefundArgs, ctx: ToolContext) -> None:
    await _get_order(OrderArgs(order_id=args.order_id), ctx)


async def _refund(args: RefundArgs, ctx: ToolContext) -> Any:
    url = fill_path("/orders/{order_id}/refunds", order_id=args.order_id)
    return await request_json(ctx, "POST", url, json={"amount_cents": args.amount_cents, "reason": args.reason})


async def _eligibility(args: OrderArgs, ctx: ToolContext) -> Any:
    return await request_json(ctx, "GET", fill_path("/orders/{order_id}/refund-eligibility", order_id=args.order_id))


def _order_for_model(order: Order) -> Mapping[str, Any]:
    facts = order.model_dump(exclude={"customer", "customer_note"})
    return OrderForModel(**facts, has_customer_note=order.customer_note is not None).model_dump(mode="json")


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
        open_world=False,
        model_view=_order_for_model,
        model_view_output=OrderForModel,
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
        open_world=False,
    ),
    Tool(
        name="orders_refund_create",
        adapter="orders",
        title="Refund an order",
        description=(
            "Requests approval to refund part or all of an order; nothing happens until an administrator "
            "approves (two of them above 50000 cents). Check orders_refund_eligibility first."
        ),
        mode=Mode.WRITE,
        arguments=RefundArgs,
        output=IssuedRefund,
        access=Access.roles("support"),
        execute=_refund,
        # Money leaves the company and the order's refundable balance shrinks: not a mere addition.
        destructive=True,
        open_world=False,
        preflight=_order_exists,
        write_contract=keyed_contract("refund_id"),
        approval=Approval(
            approver_role="approver",
            required=1,
            escalations=(Escalation(field="amount_cents", above=50_000, required=2),),
            decide_within_seconds=24 * 3600.0,
            execute_within_seconds=3600.0,
        ),
        summary=lambda args: f"Refund {args.amount_cents} cents on order {args.order_id}",
        agent_text_fields=frozenset({"reason"}),
    ),
)
