"""Reading a JSON API's request body within a bound, while it streams.

Who uses it: the admin API and the registry API, for every body they read. A body is read chunk by
chunk and the read stops at the first byte past the limit, so a client cannot make the gateway hold
more than `limit` bytes of one request in memory, whatever length it sends or announces.
"""

from __future__ import annotations

from starlette.requests import Request

__all__ = ["read_bounded"]


async def read_bounded(request: Request, limit: int) -> bytes | None:
    """The body of `request`, or None once it passes `limit` bytes (read no further)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
