"""Who a log record is about: the principal key id of the request being served, for log formatters.

Who calls it: the bearer check and the MCP surface bind the key id of the principal they serve
(`bind_key_id`); `gateway.telemetry.logs` reads it into every record. It holds a key id, never a token: a
`Principal` has no token field. It is a context variable, so concurrent requests never see each
other's, and a task started for a request inherits it.
"""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["bind_key_id", "key_id"]

_KEY_ID: ContextVar[str] = ContextVar("countersign_key_id", default="")


def bind_key_id(value: str) -> None:
    """Name the key id of the principal the current request serves (for the rest of its context)."""
    _KEY_ID.set(value)


def key_id() -> str:
    """The key id bound in this context, or ``""``."""
    return _KEY_ID.get()
