"""The Lua every ledger script starts with: its keys and arguments, the clock, load and save, the
one way an event is recorded (`gateway.store.ledger.history`), leases, the outbox and expiry.

`save` also announces every saved card on `CHANGES_CHANNEL` (pub/sub: its id, org, state and
version), and keeps the shard's open-card counts (KEYS[8]) exact: a card is counted for its requester
while it counts against its requester's open-card cap, and only then, whatever transition saved it
(its ``counted`` field says whether it is counted now). It counts while
PENDING, APPROVED or EXECUTING its first attempt: those states lead into one another only forward,
or back to APPROVED, so no transition but `propose` (which checks the cap) ever adds to a count.
Once UNKNOWN (and from there a resend or NEEDS_RECONCILIATION) it no longer counts: the agent
cannot cancel it and did nothing wrong, so a flaky backend must not lock its requester out.

`RedisLedger` registers each script of `gateway.store.ledger.scripts` as ``PRELUDE + body``.
"""

from __future__ import annotations

from gateway.store.ledger.codec import CODEC
from gateway.store.ledger.history import HISTORY
from gateway.store.ledger.layout import CHANGES_CHANNEL, OPEN_BUCKET_DIGITS

__all__ = ["PRELUDE"]

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
-- costs a third of a list and a hash beside it (bench/README.md). `transition` (below, from
-- gateway.store.ledger.history) is the one writer of both, and keeps both bounded.
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
