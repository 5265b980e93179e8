"""Single-use handles that open one read's human render to an MCP Apps view: what they hold, and the
Protocol of the store that keeps them (`gateway.store.view_handles.RedisViewHandles`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = ["Minted", "Opened", "Unopened", "ViewHandles"]

Unopened = Literal["gone", "foreign", "used"]
"""Why a handle opened nothing: expired or never minted, another principal's, or already opened."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Minted:
    """What a handle opens: one call's render, for one owner."""

    owner: str
    """Whose call it was (`owner_of` a principal); only they may redeem it."""
    tool: str
    args_hash: str
    """The call's tool and the hash of its arguments: the call this handle is bound to."""
    render: str
    """The human render of the call's result."""
    untrusted: bool
    """Whether the render carries third-party text."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Opened:
    """A redeemed handle: the call it was minted for, and its render."""

    tool: str
    args_hash: str
    render: str
    untrusted: bool


class ViewHandles(Protocol):
    """Single-use handles to human renders."""

    async def mint(self, handle: str, minted: Minted, *, ttl_ms: int) -> None:
        """Store `minted` under `handle` (a fresh random token) for `ttl_ms` milliseconds.

        Raises:
            StoreUnavailableError: the store did not take it; the handle opens nothing.
        """
        ...

    async def redeem(self, handle: str, owner: str) -> Opened | Unopened:
        """Open `handle` for `owner`, once: its render, or why it opens nothing.

        Raises:
            StoreUnavailableError: the store could not answer.
        """
        ...
