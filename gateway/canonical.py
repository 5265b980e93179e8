"""The two encodings every part of the gateway must agree on: canonical JSON and timestamps.

`canonical_json` is what every hash is taken over (a card's args_hash, a tool's definition hash, a
manifest's pin) and what the ledger stores, so the same value always gives the same bytes.
`iso_from_ms` renders a Redis-clock timestamp (ms since the epoch) for people and agents.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, overload

__all__ = ["canonical_json", "iso_from_ms"]


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 text as is; values JSON cannot hold are written as `str`."""
    return _CANONICAL.encode(value)


# What `json.dumps` would build on every call with these options (it only reuses its own for the
# defaults): one encoder holds no state between calls, so one serves them all.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


@overload
def iso_from_ms(ms: int) -> str: ...
@overload
def iso_from_ms(ms: None) -> None: ...
@overload
def iso_from_ms(ms: int | None) -> str | None: ...
def iso_from_ms(ms: int | None) -> str | None:
    """ISO 8601 in UTC with milliseconds (``2026-12-01T08:00:00.000+00:00``); None stays None."""
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
