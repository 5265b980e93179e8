"""How a card's compact table is packed into bytes: MessagePack.

Who uses it: `gateway.store.ledger.codec`, whose `CODEC` includes `PACKING` (Lua: `pack_stored` in
``save``, `unpack_stored` in ``load``) and whose `decode_card` reads through `unpack_stored` here. It
knows nothing of a card's fields: it packs the compact table as it is.

Why (bench/README.md, "Redis bytes per card"): MessagePack (``cmsgpack`` in Redis's and Valkey's Lua,
`msgpack` here) instead of JSON leaves out the quotes and the escaping of the JSON inside the card (its
arguments, agent text, event data), at no cost in Redis CPU: ``cmsgpack.pack`` takes no longer than
``cjson.encode``. Every value of the table is a string, a list of them or a marker integer, and comes back
as it went in.

A card stored as JSON (before the packing) starts with ``{``; a packed card never does (a MessagePack
map starts with a byte 0x80-0x8f, 0xde or 0xdf), so both read.
"""

from __future__ import annotations

import json
from typing import Any

import msgpack  # type: ignore[import-untyped]

__all__ = ["PACKING", "unpack_stored"]

PACKING = r"""
-- The packed bytes of a compact table `s`.
local function pack_stored(s)
  return cmsgpack.pack(s)
end

-- The compact table from its stored bytes: packed, or JSON (stored before the packing: byte 123 is '{').
local function unpack_stored(raw)
  if string.byte(raw, 1) == 123 then return cjson.decode(raw) end
  return cmsgpack.unpack(raw)
end
"""
"""Lua source defining `pack_stored` and `unpack_stored`."""


def unpack_stored(raw: bytes | str) -> dict[str, Any]:
    """The table a card was packed from (the compact table; the long form's fields for a card stored in it):
    the Python twin of the Lua `unpack_stored`."""
    if isinstance(raw, str) or raw[:1] == b"{":
        loaded: dict[str, Any] = json.loads(raw)  # stored as JSON, before the packing
        return loaded
    unpacked: dict[str, Any] = msgpack.unpackb(raw)
    return unpacked
