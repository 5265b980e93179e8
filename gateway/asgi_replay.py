"""A `receive` that gives an ASGI app again what a middleware already read from the client.

Who uses it: the middlewares that must read a request's body before passing the request on (the MCP
edge's body checks, the OAuth scope checks, the budget front). What it asks: the messages read (or
the body they held) and the client's own `receive`, which takes over once they are given.
"""

from __future__ import annotations

from starlette.types import Message, Receive

__all__ = ["replay_body", "replay_messages"]


def replay_messages(messages: list[Message], receive: Receive) -> Receive:
    """A `receive` that yields `messages` in order, once each, then the client's further messages."""
    pending = list(messages)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A `receive` that yields the already-read `body` as one message, then the client's further messages."""
    return replay_messages([{"type": "http.request", "body": body, "more_body": False}], receive)
