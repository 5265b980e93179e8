"""Handles that open one read's human render to an MCP Apps view, in Redis: single use, short lived.

Who calls it: the executor's view path (`gateway.executor.views.ViewPath`), through the
`gateway.view_handles.ViewHandles` Protocol: `mint` when a read that carries third-party text is
answered to a client that renders views, `redeem` when that view asks for the render.

Redis layout: ``countersign:view:{<sha256 of the handle, 32 hex>}`` -> a hash of the owner (org,
subject and key id), the call it was minted for (tool and arguments hash), the render and its
``untrusted`` flag, and ``used``. It expires `ttl_ms` after it was minted. The handle itself is
never a key name: a key listing does not hand out handles.

`redeem` is one script, so two views racing with one handle cannot both open it: it answers ``gone``
(expired, or never minted), ``foreign`` (minted for another principal: the hash is left as it was,
so a stranger who learnt a handle cannot spend it), ``used``, or the render, which it deletes while
marking the handle used; the used mark lives until the handle would have expired, so a replay is
told apart from an expired handle in the audit trail.
"""

from __future__ import annotations

import hashlib

import redis.asyncio as aioredis

from gateway.store.client import store_boundary
from gateway.view_handles import Minted, Opened, Unopened

__all__ = ["RedisViewHandles", "handle_key"]

MINT_SCRIPT = """
-- KEYS[1]: the handle's hash. ARGV: owner, tool, args hash, render, untrusted, ttl in milliseconds.
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'tool', ARGV[2], 'args_hash', ARGV[3],
           'render', ARGV[4], 'untrusted', ARGV[5], 'used', '0')
return redis.call('PEXPIRE', KEYS[1], ARGV[6])
"""

REDEEM_SCRIPT = """
-- KEYS[1]: the handle's hash. ARGV[1]: the owner presenting it.
local owner = redis.call('HGET', KEYS[1], 'owner')
if not owner then return {'gone'} end
if owner ~= ARGV[1] then return {'foreign'} end
if redis.call('HGET', KEYS[1], 'used') ~= '0' then return {'used'} end
local fields = redis.call('HMGET', KEYS[1], 'tool', 'args_hash', 'render', 'untrusted')
redis.call('HSET', KEYS[1], 'used', '1')
redis.call('HDEL', KEYS[1], 'render')
return {'ok', fields[1], fields[2], fields[3], fields[4]}
"""


def handle_key(handle: str) -> str:
    """The Redis key of `handle`: a digest of it, in its own hash tag (one slot per handle)."""
    return f"countersign:view:{{{hashlib.sha256(handle.encode()).hexdigest()[:32]}}}"


@store_boundary
class RedisViewHandles:
    """`gateway.view_handles.ViewHandles` on the Redis every gateway process shares."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._mint = client.register_script(MINT_SCRIPT)
        self._redeem = client.register_script(REDEEM_SCRIPT)

    async def mint(self, handle: str, minted: Minted, *, ttl_ms: int) -> None:
        args = [minted.owner, minted.tool, minted.args_hash, minted.render, "1" if minted.untrusted else "0", ttl_ms]
        await self._mint(keys=[handle_key(handle)], args=args)

    async def redeem(self, handle: str, owner: str) -> Opened | Unopened:
        answer = [_text(part) for part in await self._redeem(keys=[handle_key(handle)], args=[owner])]
        if answer[0] != "ok":
            refusal: Unopened = "foreign" if answer[0] == "foreign" else "used" if answer[0] == "used" else "gone"
            return refusal
        tool, args_hash, render, untrusted = answer[1:5]
        return Opened(tool=tool, args_hash=args_hash, render=render, untrusted=untrusted == "1")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
