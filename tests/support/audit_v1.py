"""The audit append of the chain's first version, as releases before the compact form wrote it.

Tests use it to fill a stream with old entries (what an upgraded gateway finds in Redis) and check
that the compact entries after them chain on and that everything reads both.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from gateway.audit.chain import ChainHead, legacy_entry_mac
from gateway.audit.events import AUDIT_STREAM, AuditEvent
from gateway.store.audit_stream import audit_keys

LEGACY_APPEND = """
local head = redis.call('HMGET', KEYS[2], 'mac', 'seq', 'id')
local mac = head[1] or ''
if mac ~= ARGV[1] then
  return {0, mac, head[2] or '0', head[3] or ''}
end
local args = {'XADD', KEYS[1], '*'}
for i = 4, #ARGV do args[#args + 1] = ARGV[i] end
args[#args + 1] = 'seq'
args[#args + 1] = ARGV[2]
args[#args + 1] = 'mac'
args[#args + 1] = ARGV[3]
local id = redis.call(unpack(args))
redis.call('HSET', KEYS[2], 'mac', ARGV[3], 'seq', ARGV[2], 'id', id)
return {1, id}
"""
"""The append script of version 1, verbatim."""


async def append_v1(client: Redis, secret: bytes, event: AuditEvent, stream: str = AUDIT_STREAM) -> str:
    """Append `event` as a version 1 entry after the chain head Redis keeps; its stream id."""
    head_key = audit_keys(stream)["head"]
    mac, seq, entry_id = (_text(v) for v in await client.hmget(head_key, ["mac", "seq", "id"]))
    head = ChainHead(mac=mac, seq=int(seq or 0), id=entry_id)
    fields = event.to_fields()
    own = legacy_entry_mac(secret, head, head.seq + 1, fields)
    flat = [part for pair in fields.items() for part in pair]
    answer: Any = await client.register_script(LEGACY_APPEND)(
        keys=[stream, head_key], args=[head.mac, head.seq + 1, own, *flat]
    )
    assert int(answer[0]) == 1, answer
    return _text(answer[1])


def _text(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")
