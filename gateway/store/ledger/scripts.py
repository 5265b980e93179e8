"""The ledger's Lua: one atomic script per card transition (`SCRIPTS`), each run after one shared prelude.

`RedisLedger` registers each script as ``PRELUDE + body``; card retention (`gateway.store.ledger.retention`)
runs its own removal script after the same prelude.

Storage, chosen for size (see bench/HISTORY.md): a card is one string (MessagePack), which holds its own
history (``events``) and the ids of the latest transitions applied to it (``applied``), both
bounded (below). It is stored compactly (`gateway.store.ledger.codec`);
the scripts see it expanded, every scalar value a string. Each script loads the card, checks every
guard before its first write, then changes the card, records its event and saves it: one key per
card.

Which script may start from which state, ends in which, for whom and behind which guards is the
table `gateway.cards.transitions.TRANSITIONS`, one row per script of the same name;
tests/cards/test_transitions.py runs every script from every state and holds it to that table.

**A card's history** (`HISTORY`, part of the prelude): the hash-chained events, kept bounded, and
the ids of recent transitions. Every script appends its event through `transition`, the one writer
of a card's history. What keeps a card's size bounded however long it lives:

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

**The prelude** (`PRELUDE`), which every script starts with: its keys and arguments, the clock,
load and save (through `gateway.store.ledger.codec`), the one way an event is recorded (the
history above), leases, the outbox and expiry.

`save` also announces every saved card on `CHANGES_CHANNEL` (pub/sub: its id, org, state and
version), and keeps the shard's open-card counts (KEYS[8]) exact: a card is counted for its requester
while it counts against its requester's open-card cap, and only then, whatever transition saved it
(its ``counted`` field says whether it is counted now). It counts while
PENDING, APPROVED or EXECUTING its first attempt: those states lead into one another only forward,
or back to APPROVED, so no transition but `propose` (which checks the cap) ever adds to a count.
Once UNKNOWN (and from there a resend or NEEDS_RECONCILIATION) it no longer counts: the agent
cannot cancel it and did nothing wrong, so a flaky backend must not lock its requester out.
"""

from __future__ import annotations

from gateway.cards.card import COMPACTED
from gateway.store.ledger.codec import CODEC
from gateway.store.ledger.layout import CHANGES_CHANNEL, OPEN_BUCKET_DIGITS

__all__ = ["HEAD_EVENTS", "HISTORY", "HOUSEKEEPING", "MAX_APPLIED", "MAX_EVENTS", "PRELUDE", "SCRIPTS"]

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

PRELUDE = (
    r"""
-- KEYS (all under one hash tag, so one slot):
--   1 card (compact MessagePack string, holding its events and applied transition ids),
--   2 shard outbox stream, 3 shard open-card (dedupe) hash of the entries written before the buckets
--   (`open_get` below: now only read and emptied), 4 shard index zset of the cards stored
--   before the org indexes (9) listed everyone's (now only read, by listings), 5 shard timer zset,
--   6 shard open-card set of cards stored before the counts (8): a zset, every score 0, members
--   '<requester>:<card id>', so that ZLEXCOUNT over one requester's prefix counts its open cards,
--   7 shard repeat zset: the dedupe entries kept for succeeded cards (see `close`), scored by when they lapse,
--   8 shard open-card counts: a hash, requester tag -> how many of its cards are open (all of a
--   requester's cards share a shard)
--   (propose only: 9 the shard's index of the requester's org, 10 of the requester, 11 the shard's
--   set of org tags, each naming an org index 9;
--    approve by a policy only: 9 the requester's count of policy approvals that UTC day)
-- Every script gets keys 1-8, which the helpers below name; each touches only those it needs.
-- ARGV[1] is the transition id: a retried call with the same id changes nothing.
local card_key = KEYS[1]
local outbox_key, open_key, index_key, timers_key = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local open_cards_key, repeats_key, open_count_key = KEYS[6], KEYS[7], KEYS[8]
local tid = ARGV[1]
local FOREVER = '9007199254740991'
local CHANGES_CHANNEL = '"""
    + CHANGES_CHANNEL
    + r"""'
local OPEN_BUCKET_DIGITS = """
    + str(OPEN_BUCKET_DIGITS)
    + r"""

-- The dedupe entries (stored dedupe key -> '<card id>|<until ms>') live in small hashes, one per bucket
-- of the shard (`gateway.store.ledger.layout.open_bucket`), each under the card's hash tag; the shard's
-- one hash of the entries written before (KEYS[3]) is still read, and an entry leaves it when its card
-- writes one again.
local function open_bucket(dedupe) return open_key .. ':' .. string.sub(dedupe, 1, OPEN_BUCKET_DIGITS) end

local function open_get(dedupe)
  return redis.call('HGET', open_bucket(dedupe), dedupe) or redis.call('HGET', open_key, dedupe)
end

local function open_set(dedupe, entry)
  redis.call('HSET', open_bucket(dedupe), dedupe, entry)
  redis.call('HDEL', open_key, dedupe)
end

local function open_del(dedupe)
  redis.call('HDEL', open_bucket(dedupe), dedupe)
  redis.call('HDEL', open_key, dedupe)
end

local function now_ms()
  -- The Redis server's clock, never the application's: every replica and worker agrees on expiry.
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The history and the applied transition ids live in the card itself: one key per card, which
-- costs a third of a list and a hash beside it (bench/HISTORY.md). `transition` (below, from
-- HISTORY) is the one writer of both, and keeps both bounded.
"""
    + HISTORY
    + CODEC
    + r"""
-- A card is stored compactly (gateway.store.ledger.codec); the scripts only see it expanded.
-- `replayed` hands the card it read to the `load` each script makes next (nothing is written between
-- the two, and `replayed` changes nothing in it), so a transition unpacks its card once.
local handed = nil
local function load()
  if handed then
    local c = handed
    handed = nil
    return c
  end
  local raw = redis.call('GET', card_key)
  if not raw then return nil end
  return unpack_card(raw, string.match(card_key, ':card:(.+)$'))
end

local function counts_as_open(c)
  return c.state == 'PENDING' or c.state == 'APPROVED' or (c.state == 'EXECUTING' and c.resend ~= '1')
end

-- A requester's field in the open-card counts (`gateway.store.ledger.layout.count_tag`).
local function count_tag(c)
  return string.sub(redis.sha1hex(c.requester_org .. '|' .. c.requester_subject), 1, 16)
end

local function save(c)
  -- The count follows the state on every save, so no transition out of the open states can leave a
  -- card counted; `counted` makes each change happen once, whichever transition makes it.
  local open = counts_as_open(c)
  if not c.open_member then
    if open and c.counted ~= '1' then
      redis.call('HINCRBY', open_count_key, count_tag(c), 1)
      c.counted = '1'
    elseif not open and c.counted == '1' then
      if redis.call('HINCRBY', open_count_key, count_tag(c), -1) <= 0 then
        redis.call('HDEL', open_count_key, count_tag(c))  -- the hash holds only requesters with open cards
      end
      c.counted = nil
    end
  else
    -- A card stored before the counts: a member of the open-card set while it counts. (One made
    -- before that set existed has no `open_member`: it joins the counts at its next save.)
    if open then
      redis.call('ZADD', open_cards_key, 0, c.open_member)
    else
      redis.call('ZREM', open_cards_key, c.open_member)
    end
  end
  redis.call('SET', card_key, pack_card(c))
  -- Told to whoever watches (the admin console's live list, `gateway.store.ledger.changes`): ids and
  -- states only, never the card's text. Pub/sub is not keyed, so this stays within the card's slot.
  -- pcall: a user the ACL denies the channel must still move cards (its watchers cannot subscribe
  -- either, and read the cards again instead); an error here would leave the writes above standing.
  redis.pcall('PUBLISH', CHANGES_CHANNEL, cjson.encode({card_id = c.card_id, org = c.requester_org,
    state = c.state, version = c.version}))
end

local function reply(status, c, extra)
  -- The answer carries the card's fields, not its history: callers read that with `events`.
  local fields = {}
  for k, v in pairs(c or load() or {}) do
    if k ~= 'events' and k ~= 'applied' then fields[k] = v end
  end
  return cjson.encode({status = status, card = fields, extra = extra or {}})
end

local function replayed()
  local c = load()
  local previous = c and applied_before(c, tid)
  if previous then return reply('ALREADY_APPLIED', c, {original = previous}) end
  handed = c
  return nil
end

-- Leaving the open states for good: forget the dedupe entry and any timer. A SUCCEEDED card keeps its
-- entry for its repeat window (`repeat_within_ms`, fixed when it was proposed): an identical proposal
-- is answered with it, as with an open card. `propose` prunes the entries that lapsed (`prune_repeats`).
local function close(c)
  local open = open_get(c.dedupe)
  if open and string.sub(open, 1, #c.card_id) == c.card_id then
    local window = num(c.repeat_within_ms)
    if c.state == 'SUCCEEDED' and window > 0 then
      local lapses = now_ms() + window
      open_set(c.dedupe, c.card_id .. '|' .. lapses)
      redis.call('ZADD', repeats_key, lapses, c.dedupe)
    else
      open_del(c.dedupe)
    end
  end
  redis.call('ZREM', timers_key, c.card_id)
end

-- A few lapsed repeat entries per proposal: each succeeded card adds at most one, each proposal
-- removes up to eight, so they cannot pile up. An entry the dedupe key holds now for a newer card
-- (its deadline still ahead) is left alone.
local function prune_repeats(now)
  for _, dedupe in ipairs(redis.call('ZRANGEBYSCORE', repeats_key, '-inf', now, 'LIMIT', 0, 8)) do
    local entry = open_get(dedupe)
    if entry and tonumber(string.sub(entry, string.find(entry, '|', 1, true) + 1)) <= now then
      open_del(dedupe)
    end
    redis.call('ZREM', repeats_key, dedupe)
  end
end

-- ARGV[2] is the worker, ARGV[3] the lease in ms. A new fencing token turns any older holder away.
local function take_lease(c, now, kind)
  local fence = num(c.fence) + 1
  local lease_until = now + tonumber(ARGV[3])
  c.fence, c.lease_until_ms, c.lease_owner, c.dispatched = tostring(fence), tostring(lease_until), ARGV[2], '0'
  redis.call('ZADD', timers_key, lease_until, c.card_id)
  transition(c, now, kind, ARGV[2], 'EXECUTING', {fence = fence})
end

local function enqueue(c)
  redis.call('XADD', outbox_key, '*', 'card_id', c.card_id)
end

-- Past execute_by, a card whose key may already have reached the backend (UNKNOWN, or EXECUTING a
-- resend) is sent nothing more, and cannot expire either: the earlier send may have landed. It goes
-- to a person, with the reason.
local function hand_over_late(c, now)
  local reason = 'execute_by passed before a resend; the earlier send may have landed'
  c.evidence = cjson.encode({reason = reason})
  transition(c, now, 'handed_over', 'ledger', 'NEEDS_RECONCILIATION', {deadline = 'execute_by', reason = reason})
  redis.call('ZREM', timers_key, c.card_id)
  save(c)
end

local function expire_if_due(c, now)
  local deadline = nil
  if c.state == 'PENDING' then deadline = 'decide_by' end
  if c.state == 'APPROVED' then deadline = 'execute_by' end
  if deadline and now >= num(c[deadline .. '_ms']) then
    transition(c, now, 'expired', 'ledger', 'EXPIRED', {deadline = deadline})
    close(c)
    save(c)
    return true
  end
  return false
end
"""
)
"""Lua source every script starts with (the module docstring says what it defines)."""

SCRIPTS: dict[str, str] = {
    # KEYS 9 and 10: the shard's index of the requester's org, and of the requester; 11: the shard's org tags.
    # ARGV: tid, fields (json object of strings), dedupe key, decide_within_ms, open-card cap, requester tag.
    # The dedupe entry answers while its card is open, or SUCCEEDED within its repeat window (see `close`).
    "propose": """
local again = replayed(); if again then return again end
local c, dedupe, window = cjson.decode(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local cap, requester = tonumber(ARGV[5]), ARGV[6]
local now = now_ms()
local open = open_get(dedupe)
if open then
  local sep = string.find(open, '|', 1, true)
  if now < tonumber(string.sub(open, sep + 1)) then
    return cjson.encode({status = 'EXISTING', card = {}, extra = {card_id = string.sub(open, 1, sep - 1)}})
  end
end
if redis.call('EXISTS', card_key) == 1 then return reply('ERR_EXISTS') end
-- The cap comes after the dedupe: an identical proposal still gets its open card at the cap.
local held = tonumber(redis.call('HGET', open_count_key, count_tag(c)) or '0')
  + redis.call('ZLEXCOUNT', open_cards_key, '[' .. requester .. ':', '(' .. requester .. ';')  -- older cards
if held >= cap then return reply('ERR_QUOTA_EXCEEDED', nil, {limit = cap, open = held}) end
prune_repeats(now)
local decide_by = now + window
c.created_ms, c.decide_by_ms, c.dedupe = tostring(now), tostring(decide_by), dedupe
c.fence, c.dispatched, c.attempts, c.approvers, c.version, c.seq = '0', '0', '0', '[]', '0', '0'
open_set(dedupe, c.card_id .. '|' .. decide_by)
redis.call('ZADD', KEYS[9], now, c.card_id)  -- the org's cards in this shard
redis.call('ZADD', KEYS[10], now, c.card_id)  -- the requester's cards in this shard
redis.call('SADD', KEYS[11], string.match(KEYS[9], ':org:(.+)$'))  -- so a listing of everyone finds the org
redis.call('ZADD', timers_key, decide_by, c.card_id)
transition(c, now, 'created', c.requester_subject, 'PENDING', created_data(c))
save(c)
return reply('OK', c)
""",
    # ARGV: tid, approver, version, args_hash, comment, requeue_ms, budget, identity; an approver
    # ``policy:<rule>`` gives its daily budget (ARGV 7) and KEYS 9, the requester's count of policy approvals
    # that day. ARGV 8 is the approver's identity (`gateway.principal.identity_of`, empty: the approver as
    # written): one person is one approver of a quorum however their subject is spelled.
    "approve": """
local again = replayed(); if again then return again end
local approver, version, args_hash, comment = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local by_policy = string.sub(approver, 1, 7) == 'policy:'
local c = load()
if not c then return reply('ERR_NOT_FOUND') end
local now = now_ms()
if c.state ~= 'PENDING' then return reply('ERR_STATE', c) end
-- Past the deadline the refusal still writes: the card expires here, and the answer shows it.
if expire_if_due(c, now) then return reply('ERR_EXPIRED', c) end
if approver == c.requester_subject then return reply('ERR_SELF_APPROVAL', c) end
if version ~= num(c.version) or args_hash ~= c.args_hash then return reply('ERR_STALE', c) end
local approvers = cjson.decode(c.approvers)
local identity = (ARGV[8] and ARGV[8] ~= '') and ARGV[8] or approver
local identities = c.approver_ids and cjson.decode(c.approver_ids) or {}
for _, who in ipairs(identities) do
  if who == identity then return reply('ERR_DUPLICATE_APPROVER', c) end
end
for _, who in ipairs(approvers) do
  if who == approver then return reply('ERR_DUPLICATE_APPROVER', c) end
  -- A policy is one approver of a quorum at most, whichever rule: the rest are people.
  if by_policy and string.sub(who, 1, 7) == 'policy:' then return reply('ERR_DUPLICATE_APPROVER', c) end
end
-- A policy approves within its requester's daily budget; without one (a person's call) it approves nothing.
local spent, budget = 0, 0
if by_policy then
  budget = tonumber(ARGV[7] or '0')
  -- The count must be the card's own requester's (its count tag names the key).
  local own = KEYS[9] and string.find(KEYS[9], ':policy:' .. count_tag(c) .. ':', 1, true)
  spent = own and tonumber(redis.call('GET', KEYS[9]) or '0') or 0
  if not own or spent >= budget then
    return reply('ERR_QUOTA_EXCEEDED', c, {limit = budget, spent = spent})
  end
  redis.call('INCR', KEYS[9])
  redis.call('PEXPIRE', KEYS[9], 172800000)  -- two days: the day's count outlives the day, then goes
end
approvers[#approvers + 1] = approver
c.approvers = cjson.encode(approvers)
identities[#identities + 1] = identity
c.approver_ids = cjson.encode(identities)
-- Below quorum: recorded, and the card stays PENDING.
if #approvers < num(c.approvals_required) then
  transition(c, now, 'approval_recorded', approver, 'PENDING', {comment = comment, approvals = #approvers})
  save(c)
  return reply('OK', c)
end
local execute_by = now + num(c.execute_within_ms)
c.execute_by_ms, c.approved_ms = tostring(execute_by), tostring(now)
transition(c, now, 'approved', approver, 'APPROVED', {comment = comment, approvals = #approvers})
open_set(c.dedupe, c.card_id .. '|' .. execute_by)
enqueue(c)
redis.call('ZADD', timers_key, math.min(execute_by, now + tonumber(ARGV[6])), c.card_id)
save(c)
return reply('OK', c)
""",
    # ARGV: tid, admin, reason, version and args_hash reviewed (both '' when unbound)
    "reject": """
local again = replayed(); if again then return again end
local c = load()
if not c then return reply('ERR_NOT_FOUND') end
local now = now_ms()
if c.state ~= 'PENDING' then return reply('ERR_STATE', c) end
if expire_if_due(c, now) then return reply('ERR_EXPIRED', c) end
-- A rejection bound to what the admin reviewed ('' = unbound, the veto of whatever the card is now).
if (ARGV[4] or '') ~= '' and (tonumber(ARGV[4]) ~= num(c.version) or ARGV[5] ~= c.args_hash) then
  return reply('ERR_STALE', c)
end
c.rejection = cjson.encode({by = ARGV[2], reason = ARGV[3]})
transition(c, now, 'rejected', ARGV[2], 'REJECTED', {reason = ARGV[3]})
close(c)
save(c)
return reply('OK', c)
""",
    # ARGV: tid, actor
    "cancel": """
local again = replayed(); if again then return again end
local c = load()
if not c then return reply('ERR_NOT_FOUND') end
local now = now_ms()
if c.state ~= 'PENDING' and c.state ~= 'APPROVED' then return reply('ERR_STATE', c) end
if expire_if_due(c, now) then return reply('ERR_EXPIRED', c) end
transition(c, now, 'cancelled', ARGV[2], 'CANCELLED', {})
close(c)
save(c)
return reply('OK', c)
""",
    # ARGV: tid, requeue_ms, card_id. The sweeper's step for a due timer of an open card.
    "sweep_open": """
local again = replayed(); if again then return again end
local c = load()
if not c then redis.call('ZREM', timers_key, ARGV[3]); return reply('ERR_NOT_FOUND') end
local now = now_ms()
if c.state ~= 'PENDING' and c.state ~= 'APPROVED' then return reply('ERR_STATE', c) end
if expire_if_due(c, now) then return reply('OK', c, {action = 'expired'}) end
if c.state == 'APPROVED' then
  -- Still approved after the requeue interval: the outbox entry may be lost. Enqueue again; the
  -- claim is a compare-and-set, so a duplicate entry can never run the card twice.
  enqueue(c)
  redis.call('ZADD', timers_key, math.min(num(c.execute_by_ms), now + tonumber(ARGV[2])), c.card_id)
  transition(c, now, 'requeued', 'ledger', 'APPROVED', {})
  save(c)
  return reply('OK', c, {action = 'requeued'})
end
-- PENDING before its deadline: nothing due, the card is left as it is; only its timer is set again.
redis.call('ZADD', timers_key, num(c.decide_by_ms), c.card_id)
return reply('NOT_DUE', c)
""",
    # ARGV: tid, worker, lease_ms
    "claim": """
local again = replayed(); if again then return again end
local c = load()
if not c then return reply('ERR_NOT_FOUND') end
local now = now_ms()
if c.state ~= 'APPROVED' then return reply('ERR_STATE', c) end
if expire_if_due(c, now) then return reply('ERR_EXPIRED', c) end
open_set(c.dedupe, c.card_id .. '|' .. FOREVER)
take_lease(c, now, 'claimed')
save(c)
return reply('OK', c)
""",
    # ARGV: tid, worker, lease_ms. A resend of an UNKNOWN write with the same key, before execute_by.
    "claim_resend": """
local again = replayed(); if again then return again end
local c = load()
if not c then return reply('ERR_NOT_FOUND') end
if c.state ~= 'UNKNOWN' then return reply('ERR_STATE', c) end
local now = now_ms()
-- Past execute_by no resend starts: the card goes to a person instead.
if now >= num(c.execute_by_ms) then hand_over_late(c, now); return reply('ERR_EXPIRED', c) end
-- Past the write contract's cap on resends (ARGV 4) neither: whatever a worker decided, the ledger holds it.
if ARGV[4] and num(c.attempts) - 1 >= tonumber(ARGV[4]) then
  local reason = 'resent ' .. (num(c.attempts) - 1) .. ' times, the cap of its write contract; a person must reconcile'
  c.evidence = cjson.encode({reason = reason})
  transition(c, now, 'handed_over', 'ledger', 'NEEDS_RECONCILIATION', {cap = tonumber(ARGV[4]), reason = reason})
  redis.call('ZREM', timers_key, c.card_id)
  save(c)
  return reply('ERR_QUOTA_EXCEEDED', c)
end
-- A resend for good: the key may already have reached the backend, so from here the card never goes
-- back to APPROVED or EXPIRED (release and recover return it to UNKNOWN), and a refusal proves nothing.
c.resend = '1'
take_lease(c, now, 'claimed_for_resend')
save(c)
return reply('OK', c)
""",
    # ARGV: tid, fence. Recorded before anything is sent, and only before execute_by.
    "dispatch": """
local again = replayed(); if again then return again end
local c = load()
if not c then return reply('ERR_NOT_FOUND') end
if c.state ~= 'EXECUTING' then return reply('ERR_STATE', c) end
if tonumber(ARGV[2]) ~= num(c.fence) then return reply('ERR_FENCE', c) end
local now = now_ms()
if now >= num(c.lease_until_ms) then return reply('ERR_LEASE', c) end
-- Past execute_by nothing is sent. Never sent before: the card expires. A resend: a person decides.
if c.execute_by_ms and now >= num(c.execute_by_ms) then
  if c.resend == '1' then hand_over_late(c, now); return reply('ERR_EXPIRED', c) end
  transition(c, now, 'expired', 'ledger', 'EXPIRED', {deadline = 'execute_by'})
  close(c)
  save(c)
  return reply('ERR_EXPIRED', c)
end
local attempt = num(c.attempts) + 1
c.dispatched, c.attempts, c.dispatched_ms = '1', tostring(attempt), tostring(now)
-- The first send starts the reconciliation horizon; a resend does not restart it.
c.first_dispatched_ms = c.first_dispatched_ms or tostring(now)
transition(c, now, 'dispatched', c.lease_owner, 'EXECUTING', {fence = num(c.fence), attempt = attempt})
save(c)
return reply('OK', c)
""",
    # ARGV: tid, fence, outcome (SUCCEEDED|FAILED|UNKNOWN), reference, evidence json, settle_ms
    "complete": """
local again = replayed(); if again then return again end
local c = load()
if not c then return reply('ERR_NOT_FOUND') end
local now = now_ms()
local outcome = ARGV[3]
if outcome ~= 'SUCCEEDED' and outcome ~= 'FAILED' and outcome ~= 'UNKNOWN' then return reply('ERR_ARGUMENT', c) end
if c.state ~= 'EXECUTING' or tonumber(ARGV[2]) ~= num(c.fence) then
  -- A late or fenced-off result never overwrites the card; it is recorded, not applied.
  transition(c, now, 'late_result_ignored', c.lease_owner or 'worker', c.state,
    {fence = tonumber(ARGV[2]), outcome = outcome, reference = ARGV[4]})
  save(c)
  return reply('ERR_FENCE', c)
end
c.reference, c.evidence, c.completed_ms = ARGV[4], ARGV[5], tostring(now)
local evidence = cjson.decode(ARGV[5])
transition(c, now, 'completed', c.lease_owner, outcome, {outcome = outcome, reference = ARGV[4], evidence = evidence})
if outcome == 'UNKNOWN' then
  redis.call('ZADD', timers_key, now + tonumber(ARGV[6]), c.card_id)
else
  close(c)
end
save(c)
return reply('OK', c)
""",
    # ARGV: tid, fence, reason, requeue_ms. Nothing was sent: back to APPROVED, same key (a resend: UNKNOWN).
    "release": """
local again = replayed(); if again then return again end
local c = load()
if not c then return reply('ERR_NOT_FOUND') end
-- A wrong state is answered like a lost fence: either way the caller no longer holds the card.
if c.state ~= 'EXECUTING' or tonumber(ARGV[2]) ~= num(c.fence) then return reply('ERR_FENCE', c) end
local now = now_ms()
c.dispatched, c.fence = '0', tostring(num(c.fence) + 1)
if c.resend == '1' then
  -- A resend that was not sent: an earlier send may still have landed. Back to UNKNOWN and its
  -- status query, never to APPROVED or EXPIRED.
  transition(c, now, 'released', c.lease_owner, 'UNKNOWN', {reason = ARGV[3]})
  redis.call('ZADD', timers_key, now + tonumber(ARGV[4]), c.card_id)
  save(c)
  return reply('OK', c, {action = 'unknown'})
end
if c.execute_by_ms and now >= num(c.execute_by_ms) then
  transition(c, now, 'expired', 'ledger', 'EXPIRED', {deadline = 'execute_by', reason = ARGV[3]})
  close(c)
  save(c)
  return reply('OK', c, {action = 'expired'})
end
transition(c, now, 'released', c.lease_owner, 'APPROVED', {reason = ARGV[3]})
open_set(c.dedupe, c.card_id .. '|' .. c.execute_by_ms)
redis.call('ZADD', timers_key, math.min(num(c.execute_by_ms), now + tonumber(ARGV[4])), c.card_id)
save(c)
return reply('OK', c, {action = 'released'})
""",
    # ARGV: tid. A lease ran out: never sent -> APPROVED again; sent, or a resend -> UNKNOWN (never a blind resend).
    "recover": """
local again = replayed(); if again then return again end
local c = load()
if not c then return reply('ERR_NOT_FOUND') end
if c.state ~= 'EXECUTING' then return reply('ERR_STATE', c) end
local now = now_ms()
if now < num(c.lease_until_ms) then return reply('NOT_DUE', c) end
local old_fence = num(c.fence)
c.fence = tostring(old_fence + 1)
if c.dispatched == '1' or c.resend == '1' then
  -- Sent, or a resend not yet sent whose earlier send may have landed: UNKNOWN, settled by a status query.
  local kind = c.dispatched == '1' and 'lease_lost_after_dispatch' or 'lease_lost_before_resend'
  transition(c, now, kind, 'ledger', 'UNKNOWN', {fence = old_fence})
  redis.call('ZADD', timers_key, now, c.card_id)
  save(c)
  return reply('OK', c, {action = 'unknown'})
end
if now >= num(c.execute_by_ms) then
  transition(c, now, 'expired', 'ledger', 'EXPIRED', {deadline = 'execute_by'})
  close(c)
  save(c)
  return reply('OK', c, {action = 'expired'})
end
transition(c, now, 'lease_lost_before_dispatch', 'ledger', 'APPROVED', {fence = old_fence})
open_set(c.dedupe, c.card_id .. '|' .. c.execute_by_ms)
enqueue(c)
redis.call('ZADD', timers_key, now + 1000, c.card_id)
save(c)
return reply('OK', c, {action = 'requeued'})
""",
    # ARGV: tid, result (SUCCEEDED|FAILED|NEEDS_RECONCILIATION|RESCHEDULE), reference, evidence json, next_at_ms
    "reconcile": """
local again = replayed(); if again then return again end
local c = load()
if not c then return reply('ERR_NOT_FOUND') end
if c.state ~= 'UNKNOWN' then return reply('ERR_STATE', c) end
local now = now_ms()
local result, evidence = ARGV[2], cjson.decode(ARGV[4])
if result == 'RESCHEDULE' then
  -- Not settled yet: recorded, the card stays UNKNOWN until the next status query.
  redis.call('ZADD', timers_key, tonumber(ARGV[5]), c.card_id)
  transition(c, now, 'status_checked', 'reconciler', 'UNKNOWN', {evidence = evidence})
  save(c)
  return reply('OK', c)
end
if result ~= 'SUCCEEDED' and result ~= 'FAILED' and result ~= 'NEEDS_RECONCILIATION' then
  return reply('ERR_ARGUMENT', c)
end
c.reference, c.evidence = ARGV[3], ARGV[4]
transition(c, now, 'reconciled', 'reconciler', result, {evidence = evidence, reference = ARGV[3]})
if result == 'NEEDS_RECONCILIATION' then redis.call('ZREM', timers_key, c.card_id) else close(c) end
save(c)
return reply('OK', c)
""",
    # ARGV: tid, admin, outcome (SUCCEEDED|FAILED), evidence json
    "resolve": """
local again = replayed(); if again then return again end
local c = load()
if not c then return reply('ERR_NOT_FOUND') end
if c.state ~= 'NEEDS_RECONCILIATION' then return reply('ERR_STATE', c) end
if ARGV[3] ~= 'SUCCEEDED' and ARGV[3] ~= 'FAILED' then return reply('ERR_ARGUMENT', c) end
local now = now_ms()
c.evidence, c.resolved_by = ARGV[4], ARGV[2]
transition(c, now, 'resolved', ARGV[2], ARGV[3], {evidence = cjson.decode(ARGV[4])})
close(c)
save(c)
return reply('OK', c)
""",
}
