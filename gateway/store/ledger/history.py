"""A card's history in Lua: the hash-chained events, kept bounded, and the ids of recent transitions.

Every ledger script appends its event through `transition`, the one writer of a card's history
(`gateway.store.ledger.scripts` includes this source in its prelude). What keeps a card's size
bounded however long it lives:

* **Repeats are counted, not appended.** A housekeeping step (`HOUSEKEEPING`: the sweeper's
  requeue of an approved card, a status query that settles nothing) whose event would be the same
  as the last one but for its time (same type, actor, state and data) is not appended: the last
  event's ``repeats`` and ``last_at`` record it. Both lie outside the hashed material, so the
  chain never changes: it proves the step happened first at ``at``; how often it was repeated
  since is bookkeeping, not evidence (it says nothing about whether a write landed).
* **The history is compacted past `MAX_EVENTS`.** The first `HEAD_EVENTS` events (the proposal,
  its approvals and what followed at first) and the latest ones are kept; what lies between is
  folded into one ``compacted`` event standing in for it at position `HEAD_EVENTS` + 1. Its data
  names the last event it replaced (``through``, ``through_hash``) and counts the steps it
  replaced by type. It is hashed like any event, and the chain runs through it: its ``prev`` is
  the hash of the event before it, and the event after it links to ``through_hash``
  (`gateway.cards.card.verify_chain`). What it replaced is gone; the head, the marker and the tail
  remain verifiable. So a card holds at most `MAX_EVENTS` events.
* **Only recent transition ids are kept.** ``applied`` lists the last `MAX_APPLIED` transition ids
  with their event type, newest last: a retried call (redis-py retries a command on a dropped
  connection) comes within seconds, long before that many more transitions. A card stored before
  this list existed kept a map of every id; it is still read, and replaced at the next transition.
"""

from __future__ import annotations

from gateway.cards.card import COMPACTED

__all__ = ["HEAD_EVENTS", "HISTORY", "HOUSEKEEPING", "MAX_APPLIED", "MAX_EVENTS"]

HEAD_EVENTS = 16
"""Events kept from the start of a history, however long it grows."""
MAX_EVENTS = 64
"""Events a card holds at most: `HEAD_EVENTS`, one ``compacted`` marker, and the latest ones."""
MAX_APPLIED = 32
"""Transition ids a card remembers for replay protection."""
HOUSEKEEPING = ("requeued", "status_checked")
"""Event types whose back-to-back repeats are counted on one event instead of appended."""

_CONSTANTS = (
    f"local HEAD_EVENTS, MAX_EVENTS, MAX_APPLIED = {HEAD_EVENTS}, {MAX_EVENTS}, {MAX_APPLIED}\n"
    f"local COMPACTED = '{COMPACTED}'\n"
    f"local HOUSEKEEPING = {{{', '.join(f'{kind} = true' for kind in HOUSEKEEPING)}}}\n"
)

HISTORY = (
    _CONSTANTS
    + r"""
local function num(value) return tonumber(value or '0') end

local function event_hash(e)
  return redis.sha1hex(table.concat({e.prev, e.seq, e.type, e.actor, e.state, e.version, e.at, e.data}, '|'))
end

-- The event type of transition `tid` if this card applied it before (nil otherwise).
local function applied_before(c, tid)
  local applied = c.applied or {}
  local previous = applied[tid]  -- a card stored before `applied` became a list: a map of id -> type
  for _, entry in ipairs(applied) do
    if entry[1] == tid then previous = entry[2] end
  end
  return previous
end

local function remember(c, tid, kind)
  local applied = c.applied
  if type(applied) ~= 'table' or applied[1] == nil then applied = {} end  -- none yet, or the old map
  applied[#applied + 1] = {tid, kind}
  if #applied > MAX_APPLIED then table.remove(applied, 1) end
  c.applied = applied
end

-- Fold events after position HEAD_EVENTS into the marker there (made in place of the first of them
-- the first time) until the history is back within MAX_EVENTS.
local function compact(events)
  local marker = events[HEAD_EVENTS + 1]
  local folding = {}
  if marker.type ~= COMPACTED then
    folding[1] = marker
    marker = {seq = marker.seq, type = COMPACTED, actor = 'ledger', prev = marker.prev,
      data = cjson.encode({through = 0, through_hash = '', steps = {}})}
    events[HEAD_EVENTS + 1] = marker
  end
  while #events > MAX_EVENTS do folding[#folding + 1] = table.remove(events, HEAD_EVENTS + 2) end
  local summary = cjson.decode(marker.data)
  for _, folded in ipairs(folding) do
    summary.through, summary.through_hash = num(folded.seq), folded.hash
    summary.steps[folded.type] = (summary.steps[folded.type] or 0) + 1 + num(folded.repeats)
    marker.state, marker.version, marker.at = folded.state, folded.version, folded.last_at or folded.at
  end
  marker.data = cjson.encode(summary)
  marker.hash = event_hash(marker)
end

-- Bump the version, set the new state, and record the step in the history. Values stay strings;
-- `data` is a table, or its JSON already encoded (the created event's, built in a fixed order).
local function transition(c, now, kind, actor, new_state, data)
  local version = num(c.version) + 1
  local payload = type(data) == 'string' and data or cjson.encode(data or {})
  c.state, c.version, c.updated_ms = new_state, tostring(version), tostring(now)
  remember(c, tid, kind)
  c.events = c.events or {}
  local last = c.events[#c.events]
  if HOUSEKEEPING[kind] and last and last.type == kind and last.actor == actor and last.state == new_state
      and last.data == payload then
    -- The same housekeeping step again: counted on its event, outside the hashed material.
    last.repeats, last.last_at = tostring(num(last.repeats) + 1), tostring(now)
    return
  end
  local e = {seq = tostring(num(c.seq) + 1), type = kind, actor = actor, state = new_state,
    version = tostring(version), at = tostring(now), data = payload, prev = c.chain or ''}
  e.hash = event_hash(e)
  c.seq, c.chain = e.seq, e.hash
  c.events[#c.events + 1] = e
  if #c.events > MAX_EVENTS then compact(c.events) end
end
"""
)
"""Lua source defining `num`, `applied_before` and `transition` (which needs the prelude's `tid`)."""
