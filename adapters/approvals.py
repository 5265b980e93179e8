"""Built-in tools for agents to follow their own approval cards.

They call no backend: they read and cancel the caller's cards through `ToolContext.cards`, which
is bound to the caller. A card id belonging to someone else answers exactly like a card that
does not exist (NOT_FOUND).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gateway import Access, AgentCard, Mode, Tool, ToolContext, UpstreamNotFoundError, UpstreamUnavailableError

__all__ = ["TOOLS"]

_CARD_ID = Field(pattern=r"^crd_[0-9]{1,2}_[0-9a-f]{32}$", description="A card id from a proposal receipt.")


class CardArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    card_id: str = _CARD_ID


class MineArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limit: int = Field(default=20, ge=1, le=100, description="How many of your newest cards to return (1-100).")


class CardView(AgentCard):
    """A card as its requester sees it (`gateway.cards.views.AgentCard`), and whether a cancel took."""

    cancelled: bool | None = None


class MyCards(BaseModel):
    cards: list[CardView]


def _cards(ctx: ToolContext) -> Any:
    if ctx.cards is None:
        raise UpstreamUnavailableError("approval ledger unavailable", service="approvals", sent=False)
    return ctx.cards


async def _status(args: CardArgs, ctx: ToolContext) -> Any:
    view = await _cards(ctx).status(args.card_id)
    if view is None:
        raise UpstreamNotFoundError("no such card", service="approvals", status=404)
    return view


async def _mine(args: MineArgs, ctx: ToolContext) -> Any:
    return {"cards": await _cards(ctx).mine(args.limit)}


async def _cancel(args: CardArgs, ctx: ToolContext) -> Any:
    view = await _cards(ctx).cancel(args.card_id)
    if view is None:
        raise UpstreamNotFoundError("no such card", service="approvals", status=404)
    return view


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="approvals_status",
        adapter="approvals",
        title="Approval status",
        description=(
            "Show one of your approval cards: whether an administrator decided (decision) and what came of "
            "the write (outcome), as separate fields."
        ),
        mode=Mode.READ,
        arguments=CardArgs,
        output=CardView,
        access=Access.public(),
        execute=_status,
        open_world=False,
        returns_private_data=False,  # the caller's own cards, as the gateway holds them
    ),
    Tool(
        name="approvals_mine",
        adapter="approvals",
        title="My approval cards",
        description="List your recent approval cards, newest first.",
        mode=Mode.READ,
        arguments=MineArgs,
        output=MyCards,
        access=Access.public(),
        execute=_mine,
        open_world=False,
        returns_private_data=False,  # the caller's own cards, as the gateway holds them
    ),
    Tool(
        name="approvals_cancel",
        adapter="approvals",
        title="Cancel an approval request",
        description="Withdraw one of your approval cards while it is pending or approved but not yet run.",
        mode=Mode.READ,
        arguments=CardArgs,
        output=CardView,
        access=Access.public(),
        execute=_cancel,
        changes_cards=True,
        # A withdrawn request cannot be reopened; the gateway's own ledger is all it touches.
        destructive=True,
        open_world=False,
        returns_private_data=False,  # the caller's own cards, as the gateway holds them
    ),
)
