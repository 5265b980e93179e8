"""Write previews: what a write will change, read from its backend when it is proposed.

A write tool's `PreviewRead` reads the backend once, at proposal time, and answers a `Preview`:
lines rendered for the approver (a refund: the order total, what was already refunded, the most
that can still be refunded, the amount in the order's currency), the facts those lines were drawn
from, and, when the backend would certainly refuse the write (the slot is taken, the amount is
above what can still be refunded), why not. The same read serves three purposes:

* feasibility: a preview with `infeasible` set makes no card; the proposal is refused with
  INFEASIBLE and the reason, which the gateway wrote from the backend's numbers (never the
  backend's own words), so the model can act on it;
* the card: a feasible preview is stored on the card and shown to approvers;
* the precondition: just before an approved card is sent, the worker reads the preview again; if
  it is infeasible now (what the approver decided on changed materially), the card ends FAILED
  with PRECONDITION_CHANGED and nothing is sent.

A preview's lines are for people only and may name backend objects (a room's name); the agent's
view of a card never carries them. `infeasible` is written by the adapter from numbers, times and
ids, so it may reach the model.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.tools.context import ToolContext

__all__ = ["Preview", "PreviewRead"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Preview:
    """One reading of what a write will change."""

    lines: tuple[str, ...]
    """The preview rendered for a person, one fact per line."""
    facts: Mapping[str, Any] = field(default_factory=dict)
    """The values the lines were drawn from (JSON-compatible): what the approver decides on."""
    infeasible: str | None = None
    """Set when the backend would certainly refuse the write: why, in the gateway's words."""

    def to_json(self) -> dict[str, Any]:
        """The stored form (on the card); `infeasible` is not stored, a card is only made when None."""
        return {"lines": list(self.lines), "facts": dict(self.facts)}

    @classmethod
    def from_json(cls, stored: Mapping[str, Any]) -> Preview:
        return cls(lines=tuple(str(line) for line in stored.get("lines", ())), facts=dict(stored.get("facts", {})))


PreviewRead = Callable[[Any, "ToolContext"], Awaitable[Preview]]
"""``async (arguments, ctx) -> Preview``: reads the backend, changes nothing. Raises
`UpstreamNotFoundError` (NOT_FOUND) when the target is not one this caller may see, and the other
`UpstreamError`s when the backend cannot answer (the proposal is then refused, retryably)."""
