"""What an adapter's `execute` receives besides its arguments."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from gateway.principal import Principal

__all__ = ["ToolContext"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolContext:
    """Per-call collaborators for one adapter call.

    `http` is the gateway's client for this adapter's backend: its base URL and the gateway's own
    backend credential are set by the composition root. The caller's bearer token is not here and
    cannot be: a `Principal` never holds it.
    """

    principal: Principal
    """Who is asking; adapters pass subject and org on so the backend can scope its data."""
    http: httpx.AsyncClient
    """Client for this adapter's backend."""
    service: str
    """The adapter's name, for error context."""
    idempotency_key: str | None = None
    """Set only when running an approved write: the key minted with its card."""
