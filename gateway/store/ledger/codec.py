"""How a card is stored: one compact MessagePack string, its Lua writer and reader, and the Python readers.

Who uses it: the ledger's scripts (`gateway.store.ledger.scripts` includes `CODEC` in its prelude, whose
`unpack_card` runs in ``load`` and `pack_card` in ``save``) and every Python read of a stored card
(`decode_card`, used by `gateway.store.ledger.redis_ledger` and `gateway.store.probes`; then
`card_from_fields` and `event_from_fields` make the `Card` and its `CardEvent`s, reading the JSON of
its delegation and preview with `delegation_of` and `preview_from_stored`; `stored_delegation`
writes the former for a new card). The scripts and the Python rows only ever see the *expanded*
card: long field names, every value a string, the history as a list of events with all their
fields. Only this module knows the stored form; both of its readers are generated from the tables
below, so they cannot drift. It knows nothing of Redis.

The stored form, chosen for size (bench/HISTORY.md, "Redis bytes per card"), and what it leaves out:

* **Short names.** Each known field is stored under its code in `SHORT` (``state`` as ``st``). A
  field not in the table (one a newer version adds) is stored under its own name and read back as
  it is: a new optional field costs nothing while absent and works before it is given a code.
* **No defaults.** A value equal to its `DEFAULTS` entry (``fence`` ``"0"``, no approvers yet, no
  preview) is left out and filled in again on reading.
* **Nothing derivable.** The card id is the key's own suffix; ``seq``, ``chain`` and
  ``updated_ms`` are read off the last event; an event's ``seq`` and ``prev`` follow from the
  events before it (``prev`` is the hash of the event before, or the ``through_hash`` of a
  ``compacted`` marker, whose ``through`` + 1 numbers the next). Derived links still prove the
  chain: each hash covers its ``prev``, so an altered event breaks the hash of the next
  (`gateway.cards.card.verify_chain`).
* **Times relative to creation.** The `RELATIVE` fields and each event's time are stored as ms
  after ``created_ms``.
* **Events as rows**, ``[hash, version, at, type, state, data, actor, repeats, last_at]``, with
  ``0`` in the data slot for the event type's default data (``{}``; for ``created``, the tool
  and args hash in a fixed order, `created_data`), ``0`` in the actor slot for the requester and
  ``1`` for the card's lease owner (both are read off the card as it is stored, and every save
  encodes every event again, so a later lease cannot take over an earlier event); trailing
  defaults are dropped.
* **States and event types as codes** (`WORDS`), in the card's state, its events and its applied
  transition ids.
* **Packed as bytes**: MessagePack (`PACKING`, `unpack_stored`). Why (bench/HISTORY.md, "Redis
  bytes per card"): MessagePack (``cmsgpack`` in Redis's and Valkey's Lua, `msgpack` here) instead of
  JSON leaves out the quotes and the escaping of the JSON inside the card (its arguments, agent
  text, event data), at no cost in Redis CPU: ``cmsgpack.pack`` takes no longer than
  ``cjson.encode``. Every value of the table is a string, a list of them or a marker integer, and
  comes back as it went in. The packing knows nothing of a card's fields: it packs the compact
  table as it is.

Two earlier forms still read, and a card in either is stored in the current one by its next
transition, so cards written by earlier versions read and move on without a migration: the
compact table as a JSON string (before the packing), and the long form before
it (long names, every field written out), which has no ``v`` field (the compact form always has
it: the version) and is taken as it is. A card stored as JSON starts with ``{``; a packed card
never does (a MessagePack map starts with a byte 0x80-0x8f, 0xde or 0xdf), so both read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgpack  # type: ignore[import-untyped]

from gateway.cards.card import COMPACTED, Card, CardEvent, CardState
from gateway.provenance import Provenance
from gateway.tools.preview import Preview

__all__ = [
    "CODEC",
    "DEFAULTS",
    "NO_DELEGATION",
    "PACKING",
    "RELATIVE",
    "SHORT",
    "WORDS",
    "card_from_fields",
    "created_data",
    "decode_card",
    "delegation_of",
    "event_from_fields",
    "preview_from_stored",
    "stored_delegation",
    "stored_table",
    "unpack_stored",
]


NO_DELEGATION = json.dumps({"acting_client": "", "actors": []}, sort_keys=True)
"""The ``delegation`` of a card proposed with a key, as `stored_delegation` writes it: made once, not per card."""


SHORT: Mapping[str, str] = {
    "tool": "t",
    "tool_version": "tv",
    "arguments": "a",
    "args_hash": "h",
    "requester_subject": "rs",
    "requester_org": "ro",
    "requester_key_id": "rk",
    "requester_roles": "rr",
    "approvals_required": "q",
    "approver_role": "ar",
    "summary": "s",
    "agent_text": "x",
    "execute_within_ms": "xw",
    "idempotency_key": "k",
    "transaction_id": "tx",
    "preview": "pv",
    "delegation": "dg",
    "created_ms": "c",
    "decide_by_ms": "d",
    "dedupe": "dd",
    "fence": "f",
    "dispatched": "dp",
    "attempts": "n",
    "approvers": "ap",
    "passkeys": "pk",
    "version": "v",
    "state": "st",
    "execute_by_ms": "eb",
    "approved_ms": "aa",
    "lease_until_ms": "lu",
    "lease_owner": "lo",
    "first_dispatched_ms": "fd",
    "dispatched_ms": "dm",
    "completed_ms": "cm",
    "reference": "r",
    "evidence": "e",
    "rejection": "rj",
    "resend": "re",
    "resolved_by": "rb",
    "applied": "y",
    "counted": "oc",
    "repeat_within_ms": "rw",
    "provenance": "pn",
}
"""Stored code of each known field (``events`` has its own: ``ev``)."""

DEFAULTS: Mapping[str, str] = {
    "fence": "0",
    "dispatched": "0",
    "attempts": "0",
    "approvers": "[]",
    "passkeys": "[]",
    "requester_roles": "",
    "approvals_required": "1",
    "approver_role": "approver",
    "agent_text": "{}",
    "preview": "",
    "provenance": "",
    "delegation": NO_DELEGATION,
}
"""Values left out of the stored form, and filled in on reading."""

WORDS: Mapping[str, str] = {
    "PENDING": "P",
    "APPROVED": "A",
    "EXECUTING": "E",
    "SUCCEEDED": "S",
    "FAILED": "F",
    "UNKNOWN": "U",
    "NEEDS_RECONCILIATION": "N",
    "REJECTED": "R",
    "CANCELLED": "C",
    "EXPIRED": "X",
    "created": "c",
    "approval_recorded": "ar",
    "approved": "a",
    "rejected": "r",
    "cancelled": "x",
    "expired": "e",
    "requeued": "q",
    "claimed": "cl",
    "claimed_for_resend": "cr",
    "dispatched": "d",
    "completed": "co",
    "late_result_ignored": "li",
    "released": "rl",
    "lease_lost_after_dispatch": "ld",
    "lease_lost_before_resend": "lr",
    "lease_lost_before_dispatch": "lb",
    "status_checked": "sc",
    "reconciled": "rc",
    "resolved": "rs",
    "handed_over": "h",
    COMPACTED: "k",
}
"""Stored code of each state and event type, in the card's state, its events and its applied ids. A
word not listed (a new event type) is stored as it is: every code is shorter than every word."""

RELATIVE = frozenset(
    {
        "decide_by_ms",
        "execute_by_ms",
        "approved_ms",
        "lease_until_ms",
        "first_dispatched_ms",
        "dispatched_ms",
        "completed_ms",
    }
)
"""Times stored as ms after ``created_ms``."""

_DERIVED = ("card_id", "seq", "chain", "updated_ms", "events")


def created_data(tool: str, args_hash: str) -> str:
    """The data of a card's ``created`` event, hashed into its chain: the tool and the args hash, in
    this order. Tool names and hashes need no JSON escaping (SEP-986 names, hex), so both readers
    build the same bytes by concatenation."""
    return '{"tool":"' + tool + '","args_hash":"' + args_hash + '"}'


def _lua_table(mapping: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"[{json.dumps(k)}] = {json.dumps(v)}" for k, v in mapping.items()) + "}"


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

CODEC = (
    f"local SHORT = {_lua_table(SHORT)}\n"
    f"local LONG = {_lua_table({code: name for name, code in SHORT.items()})}\n"
    f"local DEFAULTS = {_lua_table(DEFAULTS)}\n"
    f"local RELATIVE = {_lua_table({name: '1' for name in sorted(RELATIVE)})}\n"
    f"local DERIVED = {_lua_table({name: '1' for name in _DERIVED})}\n"
    f"local CODE = {_lua_table(WORDS)}\n"
    f"local WORD = {_lua_table({code: word for word, code in WORDS.items()})}\n"
    r"""
local function created_data(c)
  return '{"tool":"' .. c.tool .. '","args_hash":"' .. c.args_hash .. '"}'
end

-- The card from its stored table: long names, defaults, absolute times, full events.
local function expand(s, card_id)
  if s.v == nil then return s end  -- stored before the compact form: already the card itself
  local created = tonumber(s.c)
  local c = {}
  for k, v in pairs(s) do
    local long = LONG[k]
    if long and RELATIVE[long] then v = tostring(created + tonumber(v)) end
    if k ~= 'ev' then c[long or k] = v end
  end
  c.state = WORD[c.state] or c.state
  for _, entry in ipairs(c.applied or {}) do entry[2] = WORD[entry[2]] or entry[2] end
  for k, v in pairs(DEFAULTS) do
    if c[k] == nil then c[k] = v end
  end
  c.card_id = card_id
  local events, seq, prev = {}, 1, ''
  for i, row in ipairs(s.ev or {}) do
    local e = {hash = row[1], version = row[2], at = tostring(created + tonumber(row[3])),
      type = WORD[row[4]] or row[4], state = WORD[row[5]] or row[5], data = row[6], actor = row[7],
      seq = tostring(seq), prev = prev}
    if e.data == nil or e.data == 0 then e.data = e.type == 'created' and created_data(c) or '{}' end
    if e.actor == nil or e.actor == 0 then
      e.actor = c.requester_subject
    elseif e.actor == 1 then
      e.actor = c.lease_owner
    end
    if row[8] then e.repeats, e.last_at = row[8], tostring(created + tonumber(row[9])) end
    if e.type == COMPACTED then
      local marker = cjson.decode(e.data)
      seq, prev = tonumber(marker.through) + 1, marker.through_hash
    else
      seq, prev = seq + 1, e.hash
    end
    events[i] = e
  end
  c.events = events
  local last = events[#events]
  c.seq, c.chain = last and last.seq or '0', last and last.hash or ''
  c.updated_ms = last and (last.last_at or last.at) or c.created_ms
  return c
end

-- The stored table of a card: the inverse of `expand`.
local function compact(c)
  local created = tonumber(c.created_ms)
  local s = {}
  for k, v in pairs(c) do
    if not DERIVED[k] and DEFAULTS[k] ~= v then
      local code = SHORT[k]
      if code and RELATIVE[k] then
        if tonumber(v) then v = tostring(tonumber(v) - created) else code = nil end
      end
      s[code or k] = v
    end
  end
  s.st = CODE[c.state] or c.state
  if c.applied and c.applied[1] then
    local applied = {}
    for i, entry in ipairs(c.applied) do applied[i] = {entry[1], CODE[entry[2]] or entry[2]} end
    s.y = applied
  end
  local rows, prev = {}, ''
  for i, e in ipairs(c.events or {}) do
    local default = e.type == 'created' and created_data(c) or '{}'
    local actor = e.actor
    if actor == c.requester_subject then actor = 0 elseif actor == c.lease_owner then actor = 1 end
    local row = {e.hash, e.version, tostring(tonumber(e.at) - created), CODE[e.type] or e.type,
      CODE[e.state] or e.state, e.data == default and 0 or e.data, actor}
    if e.repeats then
      row[8], row[9] = e.repeats, tostring(tonumber(e.last_at) - created)
    else
      while row[#row] == 0 do row[#row] = nil end
    end
    rows[i] = row
  end
  s.ev = rows
  return s
end

"""
    + PACKING
    + r"""
local function pack_card(c) return pack_stored(compact(c)) end

local function unpack_card(raw, card_id) return expand(unpack_stored(raw), card_id) end
"""
)
"""Lua source defining `expand` and `compact` (which need the history's `COMPACTED`), and `unpack_card` and
`pack_card`: the same through the packing."""


def unpack_stored(raw: bytes | str) -> dict[str, Any]:
    """The table a card was packed from (the compact table; the long form's fields for a card stored in it):
    the Python twin of the Lua `unpack_stored`."""
    if isinstance(raw, str) or raw[:1] == b"{":
        loaded: dict[str, Any] = json.loads(raw)  # stored as JSON, before the packing
        return loaded
    unpacked: dict[str, Any] = msgpack.unpackb(raw)
    return unpacked


def stored_table(raw: bytes | str) -> dict[str, Any]:
    """The compact table of a stored card (or the long form's fields): what `decode_card` expands."""
    return unpack_stored(raw)


def decode_card(raw: bytes | str, card_id: str) -> dict[str, Any]:
    """The expanded card (long names, string values, ``events`` as dicts) from its stored bytes, in any
    form; the Python twin of the Lua `unpack_card`, held to it by tests/store/ledger/test_codec.py."""
    stored = stored_table(raw)
    if "v" not in stored:
        return stored  # stored before the compact form
    created = int(stored["c"])
    card: dict[str, Any] = {}
    for key, value in stored.items():
        if key == "ev":
            continue
        name = _LONG.get(key, key)
        card[name] = str(created + int(value)) if name in RELATIVE and name != key else value
    card = {**DEFAULTS, **card, "card_id": card_id}
    card["state"] = _WORD.get(card["state"], card["state"])
    if isinstance(card.get("applied"), list):
        card["applied"] = [[tid, _WORD.get(kind, kind)] for tid, kind in card["applied"]]
    events: list[dict[str, Any]] = []
    seq, prev = 1, ""
    for row in stored.get("ev", ()):
        hash_, version, at, kind_code, state_code, *rest = row
        kind, state = _WORD.get(kind_code, kind_code), _WORD.get(state_code, state_code)
        data = rest[0] if len(rest) > 0 and rest[0] != 0 else None
        actor = rest[1] if len(rest) > 1 else 0
        if actor == 0 or actor == 1:  # the requester, the card's lease owner
            actor = card["requester_subject"] if actor == 0 else card["lease_owner"]
        if data is None:
            data = created_data(card["tool"], card["args_hash"]) if kind == "created" else "{}"
        event = {
            "hash": hash_,
            "version": version,
            "at": str(created + int(at)),
            "type": kind,
            "state": state,
            "data": data,
            "actor": actor,
            "seq": str(seq),
            "prev": prev,
        }
        if len(rest) > 2:
            event["repeats"], event["last_at"] = rest[2], str(created + int(rest[3]))
        if kind == COMPACTED:
            marker = json.loads(data)
            seq, prev = int(marker["through"]) + 1, marker["through_hash"]
        else:
            seq, prev = seq + 1, hash_
        events.append(event)
    card["events"] = events
    last = events[-1] if events else None
    card["seq"], card["chain"] = (last["seq"], last["hash"]) if last else ("0", "")
    card["updated_ms"] = (last.get("last_at") or last["at"]) if last else card["created_ms"]
    return card


_LONG = {code: name for name, code in SHORT.items()}
_WORD = {code: word for word, code in WORDS.items()}


# -- the expanded card as a `Card` and its history as `CardEvent`s ---------------------------------


def _optional_int(value: str | None) -> int | None:
    return int(value) if value not in (None, "") else None


def _mapping(raw: str | None) -> dict[str, Any]:
    """A stored JSON object; an empty one (most cards' evidence and rejection, while they have none) is
    not parsed."""
    return json.loads(raw) if raw and raw != "{}" else {}


def card_from_fields(f: Mapping[str, str]) -> Card:
    """A card from its stored fields (all strings, as the scripts keep them)."""
    return Card(
        card_id=f["card_id"],
        tool=f["tool"],
        tool_version=f["tool_version"],
        arguments=json.loads(f["arguments"]),
        args_hash=f["args_hash"],
        requester_subject=f["requester_subject"],
        requester_org=f["requester_org"],
        requester_key_id=f["requester_key_id"],
        state=CardState(f["state"]),
        version=int(f["version"]),
        idempotency_key=f["idempotency_key"],
        transaction_id=f["transaction_id"],
        approvals_required=int(f["approvals_required"]),
        approvers=tuple(json.loads(raw)) if (raw := f.get("approvers")) and raw != "[]" else (),
        passkeys=tuple(json.loads(raw)) if (raw := f.get("passkeys")) and raw != "[]" else (),
        summary=f["summary"],
        agent_text=_mapping(f.get("agent_text")),
        created_ms=int(f["created_ms"]),
        decide_by_ms=int(f["decide_by_ms"]),
        execute_by_ms=_optional_int(f.get("execute_by_ms")),
        execute_within_ms=int(f.get("execute_within_ms") or 0),
        fence=int(f.get("fence") or 0),
        dispatched=f.get("dispatched") == "1",
        attempts=int(f.get("attempts") or 0),
        dispatched_ms=_optional_int(f.get("dispatched_ms")),
        first_dispatched_ms=_optional_int(f.get("first_dispatched_ms")),
        approved_ms=_optional_int(f.get("approved_ms")),
        resend=f.get("resend") == "1",
        reference=f.get("reference") or None,
        evidence=_mapping(f.get("evidence")),
        rejection=_mapping(f.get("rejection")),
        approver_role=f.get("approver_role", "approver"),
        requester_roles=frozenset(r for r in f.get("requester_roles", "").split(",") if r),
        preview=preview_from_stored(f.get("preview")),
        provenance=Provenance.from_stored(f.get("provenance")),
        **delegation_of(f.get("delegation")),
    )


def event_from_fields(f: Mapping[str, str]) -> CardEvent:
    """One history entry from its stored fields."""
    return CardEvent(
        seq=int(f["seq"]),
        type=f["type"],
        actor=f["actor"],
        state=f["state"],
        version=int(f["version"]),
        at_ms=int(f["at"]),
        data=json.loads(f["data"]),
        data_raw=f["data"],
        prev=f["prev"],
        hash=f["hash"],
        repeats=int(f.get("repeats") or 0),
        last_at_ms=_optional_int(f.get("last_at")),
    )


def preview_from_stored(raw: str | None) -> Preview | None:
    """A card's preview from its stored JSON (`Preview.to_json`); None when none was stored."""
    return Preview.from_json(json.loads(raw)) if raw else None


def stored_delegation(acting_client: str, actors: tuple[str, ...]) -> dict[str, str]:
    """The ``delegation`` field a new card stores: its acting client and actor chain, as JSON (`delegation_of`)."""
    if not acting_client and not actors:  # a card proposed with a key: most are
        return {"delegation": NO_DELEGATION}
    return {"delegation": json.dumps({"acting_client": acting_client, "actors": list(actors)}, sort_keys=True)}


def delegation_of(stored: str | None) -> dict[str, Any]:
    """`Card.acting_client` and `Card.actors` from a stored card's ``delegation`` field (JSON); a card
    proposed with a key, or stored before delegation was recorded, has none of either."""
    data = json.loads(stored) if stored and stored != NO_DELEGATION else {}
    return {"acting_client": str(data.get("acting_client", "")), "actors": tuple(data.get("actors", ()))}
