"""What an adapter's backend client is: the `UpstreamClient` Protocol and the answer it returns.

Adapters call it through `ToolContext.http`; the composition root builds the real one
(`gateway.outbound.backend_client.AiohttpUpstream`) with the backend's base URL and the gateway's own
credential. Implementations raise `UpstreamError`s with `sent` telling whether the request may have
reached the backend, never a library's exceptions.
"""

from __future__ import annotations

import json as jsonlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["UpstreamClient", "UpstreamResponse"]


@dataclass(frozen=True, slots=True)
class UpstreamResponse:
    """A backend's answer: its status and its raw body."""

    status: int
    body: bytes
    retry_after: str | None = None
    """The raw ``Retry-After`` header of a 429 (None otherwise); backend text, parsed before any use."""

    def json(self) -> Any:
        """The body as JSON. Raises ValueError when it is not JSON."""
        return jsonlib.loads(self.body)


class UpstreamClient(Protocol):
    """What adapters call. Implementations raise `UpstreamError`s, never a library's exceptions."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> UpstreamResponse: ...

    async def aclose(self) -> None: ...
