"""What an adapter's `execute` receives besides its arguments."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.principal import Principal
from gateway.tools.upstream import UpstreamClient

__all__ = ["CallerCards", "RequestSigner", "ToolContext"]

RequestSigner = Callable[[str, str, Mapping[str, str] | None, Any], Mapping[str, str]]
"""``(method, path, query, json body) -> headers`` carrying the signed approval receipt of one request
of an approved write (`gateway.signing.receipts`)."""


class CallerCards(Protocol):
    """The caller's own approval cards, as built-in tools see them.

    Bound to one principal: a card of anyone else answers exactly like a card that does not exist
    (None). Views are safe for the model: no third-party text, no roles.
    """

    async def status(self, card_id: str) -> Mapping[str, Any] | None: ...

    async def mine(self, limit: int) -> Sequence[Mapping[str, Any]]: ...

    async def cancel(self, card_id: str) -> Mapping[str, Any] | None:
        """Cancel an own card while PENDING or APPROVED; returns its view (state says if it worked)."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolContext:
    """Per-call collaborators for one adapter call.

    `http` is the gateway's client for this adapter's backend: its base URL and the gateway's own
    backend credential are set by the composition root. The caller's bearer token is not here and
    cannot be: a `Principal` never holds it.
    """

    principal: Principal
    """Who is asking; adapters pass subject and org on so the backend can scope its data."""
    http: UpstreamClient | None
    """Client for this adapter's backend (None for built-in tools that call no backend)."""
    service: str
    """The adapter's name, for error context."""
    idempotency_key: str | None = None
    """Set only when running an approved write: the key minted with its card."""
    cards: CallerCards | None = None
    """The caller's cards, for the built-in approvals tools."""
    identity: Mapping[str, str] = field(default_factory=dict)
    """Headers that tell the backend who is asking (subject, org, and a signed claim when keyed)."""
    receipt: RequestSigner | None = None
    """Set only when running an approved write: signs the receipt each request of the send carries."""
    answered: Callable[[int], None] | None = None
    """Set only when running an approved write: told the HTTP status of each answer to a request of the send
    that can change something (not GET, HEAD, OPTIONS), so the card can record what the backend answered."""
    approved_arguments: Mapping[str, Any] | None = None
    """Set only when settling an approved write whose outcome is unknown: the arguments approved, for a
    lookup that matches on them (an upstream MCP server has no key to look a write up by)."""
    preview_facts: Mapping[str, Any] | None = None
    """Set only when settling an approved write whose outcome is unknown, and its card has a preview: the
    facts read at proposal, for a state lookup to say whether the state it finds held already then."""
