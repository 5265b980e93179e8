"""Where the live audit export stands: the id of the last entry a receiver took, and who exports now.

Who calls it: the audit forwarder (`gateway.audit.forwarder`), in `serve` and `worker`. The cursor
moves only forward and only by compare-and-set, after the receiver answered 2xx, so an entry is
sent at least once (again after a crash between the answer and the move). Only one process at a
time exports: it holds a lease (`hold`), renewed each round, which another takes over when it lapses.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from gateway.store.client import store_boundary

__all__ = ["AuditExportCursor"]

_TAG = "cs:{auditx}"

# KEYS: lease. ARGV: token, lease_ms. Take the lease when it is free, renew it when it is ours.
_HOLD = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# KEYS: cursor. ARGV: expected position ('' for none), new position.
_ADVANCE = """
if (redis.call('GET', KEYS[1]) or '') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""


@store_boundary
class AuditExportCursor:
    """One export target's position in the trail, and its lease. Raises `StoreUnavailableError`."""

    def __init__(self, client: aioredis.Redis, *, target: str = "default") -> None:
        self._client = client
        self._cursor = f"{_TAG}:{target}:cursor"
        self._lease = f"{_TAG}:{target}:lease"
        self._hold = client.register_script(_HOLD)
        self._advance = client.register_script(_ADVANCE)

    async def position(self) -> str:
        """The id of the last entry exported, or ``""`` before the first."""
        raw: Any = await self._client.get(self._cursor)
        return raw.decode() if isinstance(raw, bytes) else (raw or "")

    async def advance(self, expected: str, to: str) -> bool:
        """Move from `expected` to `to`; False (nothing changed) when another process moved it first."""
        return int(await self._advance(keys=[self._cursor], args=[expected, to])) == 1

    async def hold(self, token: str, *, lease_ms: int) -> bool:
        """Take or renew the export lease for `token`; False while another process holds it."""
        return int(await self._hold(keys=[self._lease], args=[token, lease_ms])) == 1
