"""A `receive` that gives an ASGI app again what a middleware already read from the client.

Who uses it: the middlewares that must read a request's body before passing the request on (the MCP
edge's body checks, the OAuth scope checks, the budget front). What it asks: the message read (or
the body it held) and the client's own `receive`, which takes over once it is given.
"""

from __future__ import annotations

from starlette.types import Message, Receive

__all__ = ["replay_body", "replay_message"]


def replay_message(message: Message, receive: Receive) -> Receive:
    """A `receive` that yields `message` once, then the client's further messages."""
    pending: Message | None = message

    async def replay() -> Message:
        nonlocal pending
        if pending is None:
            return await receive()
        given, pending = pending, None
        return given

    return replay


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A `receive` that yields the already-read `body` as one message, then the client's further messages."""
    return replay_message({"type": "http.request", "body": body, "more_body": False}, receive)
