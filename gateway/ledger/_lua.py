"""The ledger's Lua scripts: one atomic script per card transition, sharing one prelude."""

from __future__ import annotations

__all__ = ["PRELUDE", "SCRIPTS"]

PRELUDE = r"""-- Shared by every card transition. KEYS (all under one hash tag, so one slot):
--   1 card hash, 2 card event stream, 3 applied-transition hash,
--   4 shard outbox stream, 5 shard open-card (dedupe) hash, 6 shard index zset, 7 shard timer zset
-- ARGV[1] is the transition id: a retried call with the same id changes nothing.
-- Rule for every script: all guards are checked before the first write.
local card_key, events_key, tx_key = KEYS[1], KEYS[2], KEYS[3]
local outbox_key, open_key, index_key, timers_key = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local tid = ARGV[1]
local FOREVER = 9007199254740991

local function now_ms()
  -- The Redis server's clock, never the application's: every replica and worker agrees on expiry.
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function card()
  local flat = redis.call('HGETALL', card_key)
  local map = {}
  for i = 1, #flat, 2 do map[flat[i]] = flat[i + 1] end
  return map
end

local function reply(status, extra)
  return cjson.encode({status = status, card = card(), extra = extra or {}})
end

local function replayed()
  local previous = redis.call('HGET', tx_key, tid)
  if previous then return reply('ALREADY_APPLIED', {original = previous}) end
  return nil
end

-- Bump the version, write the new state, and append a hash-chained event, all in this script.
local function transition(now, kind, actor, new_state, data)
  local c = card()
  local version = tonumber(c.version or '0') + 1
  local seq = tonumber(c.seq or '0') + 1
  local prev = c.chain or ''
  local payload = cjson.encode(data or {})
  local hash = redis.sha1hex(table.concat({prev, seq, kind, actor, new_state, version, now, payload}, '|'))
  redis.call('HSET', card_key, 'state', new_state, 'version', version, 'seq', seq, 'chain', hash, 'updated_ms', now)
  redis.call('XADD', events_key, '*', 'seq', seq, 'type', kind, 'actor', actor, 'state', new_state,
    'version', version, 'at', now, 'data', payload, 'prev', prev, 'hash', hash)
  redis.call('HSET', tx_key, tid, kind)
end

-- Leaving the open states for good: forget the dedupe entry and any timer.
local function close(c)
  if c.dedupe and redis.call('HGET', open_key, c.dedupe) and
     string.sub(redis.call('HGET', open_key, c.dedupe), 1, #c.card_id) == c.card_id then
    redis.call('HDEL', open_key, c.dedupe)
  end
  redis.call('ZREM', timers_key, c.card_id)
end

local function enqueue(c)
  redis.call('XADD', outbox_key, '*', 'card_id', c.card_id)
end

local function expire_if_due(c, now)
  if c.state == 'PENDING' and now >= tonumber(c.decide_by_ms) then
    transition(now, 'expired', 'ledger', 'EXPIRED', {deadline = 'decide_by'})
    close(c)
    return true
  end
  if c.state == 'APPROVED' and now >= tonumber(c.execute_by_ms) then
    transition(now, 'expired', 'ledger', 'EXPIRED', {deadline = 'execute_by'})
    close(c)
    return true
  end
  return false
end
"""

SCRIPTS: dict[str, str] = {
    # ARGV: tid, fields (json object), dedupe key, decide_within_ms
    "create": """
local again = replayed(); if again then return again end
local fields, dedupe, window = cjson.decode(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local now = now_ms()
local open = redis.call('HGET', open_key, dedupe)
if open then
  local sep = string.find(open, '|', 1, true)
  local deadline = tonumber(string.sub(open, sep + 1))
  if now < deadline then
    return cjson.encode({status = 'EXISTING', card = {}, extra = {card_id = string.sub(open, 1, sep - 1)}})
  end
end
if redis.call('EXISTS', card_key) == 1 then return reply('ERR_EXISTS') end
local flat = {}
for k, v in pairs(fields) do flat[#flat + 1] = k; flat[#flat + 1] = tostring(v) end
redis.call('HSET', card_key, unpack(flat))
local decide_by = now + window
redis.call('HSET', card_key, 'created_ms', now, 'decide_by_ms', decide_by, 'dedupe', dedupe, 'fence', 0,
  'dispatched', 0, 'attempts', 0, 'approvers', '[]', 'version', 0, 'seq', 0)
redis.call('HSET', open_key, dedupe, fields.card_id .. '|' .. decide_by)
redis.call('ZADD', index_key, now, fields.card_id)
redis.call('ZADD', timers_key, decide_by, fields.card_id)
transition(now, 'created', fields.requester_subject, 'PENDING', {tool = fields.tool, args_hash = fields.args_hash})
return reply('OK')
""",
    # ARGV: tid, approver, version, args_hash, comment, requeue_ms
    "approve": """
local again = replayed(); if again then return again end
local approver, version, args_hash, comment = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local c = card()
if not c.card_id then return reply('ERR_NOT_FOUND') end
local now = now_ms()
if c.state ~= 'PENDING' then return reply('ERR_STATE') end
if expire_if_due(c, now) then return reply('ERR_EXPIRED') end
if approver == c.requester_subject then return reply('ERR_SELF_APPROVAL') end
if version ~= tonumber(c.version) or args_hash ~= c.args_hash then return reply('ERR_STALE') end
local approvers = cjson.decode(c.approvers)
for _, who in ipairs(approvers) do
  if who == approver then return reply('ERR_DUPLICATE_APPROVER') end
end
approvers[#approvers + 1] = approver
redis.call('HSET', card_key, 'approvers', cjson.encode(approvers))
if #approvers < tonumber(c.approvals_required) then
  transition(now, 'approval_recorded', approver, 'PENDING', {comment = comment, approvals = #approvers})
  return reply('OK')
end
local execute_by = now + tonumber(c.execute_within_ms)
redis.call('HSET', card_key, 'execute_by_ms', execute_by, 'approved_ms', now)
transition(now, 'approved', approver, 'APPROVED', {comment = comment, approvals = #approvers})
redis.call('HSET', open_key, c.dedupe, c.card_id .. '|' .. execute_by)
enqueue(c)
redis.call('ZADD', timers_key, math.min(execute_by, now + tonumber(ARGV[6])), c.card_id)
return reply('OK')
""",
    # ARGV: tid, admin, reason
    "reject": """
local again = replayed(); if again then return again end
local c = card()
if not c.card_id then return reply('ERR_NOT_FOUND') end
local now = now_ms()
if c.state ~= 'PENDING' then return reply('ERR_STATE') end
if expire_if_due(c, now) then return reply('ERR_EXPIRED') end
redis.call('HSET', card_key, 'rejection', cjson.encode({by = ARGV[2], reason = ARGV[3]}))
transition(now, 'rejected', ARGV[2], 'REJECTED', {reason = ARGV[3]})
close(c)
return reply('OK')
""",
    # ARGV: tid, actor
    "cancel": """
local again = replayed(); if again then return again end
local c = card()
if not c.card_id then return reply('ERR_NOT_FOUND') end
local now = now_ms()
if c.state ~= 'PENDING' and c.state ~= 'APPROVED' then return reply('ERR_STATE') end
if expire_if_due(c, now) then return reply('ERR_EXPIRED') end
transition(now, 'cancelled', ARGV[2], 'CANCELLED', {})
close(c)
return reply('OK')
""",
    # ARGV: tid, requeue_ms, card_id. The sweeper's step for a due timer of an open card.
    "sweep_open": """
local again = replayed(); if again then return again end
local c = card()
if not c.card_id then redis.call('ZREM', timers_key, ARGV[3]); return reply('ERR_NOT_FOUND') end
local now = now_ms()
if c.state ~= 'PENDING' and c.state ~= 'APPROVED' then return reply('ERR_STATE') end
if expire_if_due(c, now) then return reply('OK', {action = 'expired'}) end
if c.state == 'APPROVED' then
  -- Still approved after the requeue interval: the outbox entry may be lost. Enqueue again; the
  -- claim is a compare-and-set, so a duplicate entry can never run the card twice.
  enqueue(c)
  redis.call('ZADD', timers_key, math.min(tonumber(c.execute_by_ms), now + tonumber(ARGV[2])), c.card_id)
  transition(now, 'requeued', 'ledger', 'APPROVED', {})
  return reply('OK', {action = 'requeued'})
end
redis.call('ZADD', timers_key, tonumber(c.decide_by_ms), c.card_id)
return reply('NOT_DUE')
""",
    # ARGV: tid, worker, lease_ms
    "claim": """
local again = replayed(); if again then return again end
local c = card()
if not c.card_id then return reply('ERR_NOT_FOUND') end
local now = now_ms()
if c.state ~= 'APPROVED' then return reply('ERR_STATE') end
if expire_if_due(c, now) then return reply('ERR_EXPIRED') end
local fence = tonumber(c.fence) + 1
local lease_until = now + tonumber(ARGV[3])
redis.call('HSET', card_key, 'fence', fence, 'lease_until_ms', lease_until, 'lease_owner', ARGV[2], 'dispatched', 0)
redis.call('HSET', open_key, c.dedupe, c.card_id .. '|' .. FOREVER)
redis.call('ZADD', timers_key, lease_until, c.card_id)
transition(now, 'claimed', ARGV[2], 'EXECUTING', {fence = fence})
return reply('OK')
""",
    # ARGV: tid, worker, lease_ms. A resend of an UNKNOWN write with the same key.
    "claim_resend": """
local again = replayed(); if again then return again end
local c = card()
if not c.card_id then return reply('ERR_NOT_FOUND') end
if c.state ~= 'UNKNOWN' then return reply('ERR_STATE') end
local now = now_ms()
local fence = tonumber(c.fence) + 1
local lease_until = now + tonumber(ARGV[3])
redis.call('HSET', card_key, 'fence', fence, 'lease_until_ms', lease_until, 'lease_owner', ARGV[2], 'dispatched', 0)
redis.call('ZADD', timers_key, lease_until, c.card_id)
transition(now, 'claimed_for_resend', ARGV[2], 'EXECUTING', {fence = fence})
return reply('OK')
""",
    # ARGV: tid, fence. Recorded before anything is sent.
    "dispatch": """
local again = replayed(); if again then return again end
local c = card()
if not c.card_id then return reply('ERR_NOT_FOUND') end
if c.state ~= 'EXECUTING' then return reply('ERR_STATE') end
if tonumber(ARGV[2]) ~= tonumber(c.fence) then return reply('ERR_FENCE') end
local now = now_ms()
if now >= tonumber(c.lease_until_ms) then return reply('ERR_LEASE') end
redis.call('HSET', card_key, 'dispatched', 1, 'attempts', tonumber(c.attempts) + 1, 'dispatched_ms', now)
local attempt = tonumber(c.attempts) + 1
transition(now, 'dispatched', c.lease_owner, 'EXECUTING', {fence = tonumber(c.fence), attempt = attempt})
return reply('OK')
""",
    # ARGV: tid, fence, outcome (SUCCEEDED|FAILED|UNKNOWN), reference, evidence json, settle_ms
    "complete": """
local again = replayed(); if again then return again end
local c = card()
if not c.card_id then return reply('ERR_NOT_FOUND') end
local now = now_ms()
local outcome = ARGV[3]
if outcome ~= 'SUCCEEDED' and outcome ~= 'FAILED' and outcome ~= 'UNKNOWN' then return reply('ERR_ARGUMENT') end
if c.state ~= 'EXECUTING' or tonumber(ARGV[2]) ~= tonumber(c.fence) then
  -- A late or fenced-off result never overwrites the card; it is recorded, not applied.
  transition(now, 'late_result_ignored', c.lease_owner or 'worker', c.state,
    {fence = tonumber(ARGV[2]), outcome = outcome, reference = ARGV[4]})
  return reply('ERR_FENCE')
end
redis.call('HSET', card_key, 'reference', ARGV[4], 'evidence', ARGV[5], 'completed_ms', now)
local evidence = cjson.decode(ARGV[5])
transition(now, 'completed', c.lease_owner, outcome, {outcome = outcome, reference = ARGV[4], evidence = evidence})
if outcome == 'UNKNOWN' then
  redis.call('ZADD', timers_key, now + tonumber(ARGV[6]), c.card_id)
else
  close(c)
end
return reply('OK')
""",
    # ARGV: tid, fence, reason, requeue_ms. Nothing was sent: back to APPROVED, same key.
    "release": """
local again = replayed(); if again then return again end
local c = card()
if not c.card_id then return reply('ERR_NOT_FOUND') end
if c.state ~= 'EXECUTING' or tonumber(ARGV[2]) ~= tonumber(c.fence) then return reply('ERR_FENCE') end
local now = now_ms()
redis.call('HSET', card_key, 'dispatched', 0, 'fence', tonumber(c.fence) + 1)
if c.execute_by_ms and now >= tonumber(c.execute_by_ms) then
  transition(now, 'expired', 'ledger', 'EXPIRED', {deadline = 'execute_by', reason = ARGV[3]})
  close(c)
  return reply('OK', {action = 'expired'})
end
transition(now, 'released', c.lease_owner, 'APPROVED', {reason = ARGV[3]})
redis.call('HSET', open_key, c.dedupe, c.card_id .. '|' .. c.execute_by_ms)
redis.call('ZADD', timers_key, math.min(tonumber(c.execute_by_ms), now + tonumber(ARGV[4])), c.card_id)
return reply('OK', {action = 'released'})
""",
    # ARGV: tid. A lease ran out: never sent -> APPROVED again; sent -> UNKNOWN (never a blind resend).
    "recover": """
local again = replayed(); if again then return again end
local c = card()
if not c.card_id then return reply('ERR_NOT_FOUND') end
if c.state ~= 'EXECUTING' then return reply('ERR_STATE') end
local now = now_ms()
if now < tonumber(c.lease_until_ms) then return reply('NOT_DUE') end
redis.call('HSET', card_key, 'fence', tonumber(c.fence) + 1)
if tonumber(c.dispatched) == 1 then
  transition(now, 'lease_lost_after_dispatch', 'ledger', 'UNKNOWN', {fence = tonumber(c.fence)})
  redis.call('ZADD', timers_key, now, c.card_id)
  return reply('OK', {action = 'unknown'})
end
if now >= tonumber(c.execute_by_ms) then
  transition(now, 'expired', 'ledger', 'EXPIRED', {deadline = 'execute_by'})
  close(c)
  return reply('OK', {action = 'expired'})
end
transition(now, 'lease_lost_before_dispatch', 'ledger', 'APPROVED', {fence = tonumber(c.fence)})
redis.call('HSET', open_key, c.dedupe, c.card_id .. '|' .. c.execute_by_ms)
enqueue(c)
redis.call('ZADD', timers_key, now + 1000, c.card_id)
return reply('OK', {action = 'requeued'})
""",
    # ARGV: tid, result (SUCCEEDED|FAILED|NEEDS_RECONCILIATION|RESCHEDULE), reference, evidence json, next_at_ms
    "reconcile": """
local again = replayed(); if again then return again end
local c = card()
if not c.card_id then return reply('ERR_NOT_FOUND') end
if c.state ~= 'UNKNOWN' then return reply('ERR_STATE') end
local now = now_ms()
local result, evidence = ARGV[2], cjson.decode(ARGV[4])
if result == 'RESCHEDULE' then
  redis.call('ZADD', timers_key, tonumber(ARGV[5]), c.card_id)
  transition(now, 'status_checked', 'reconciler', 'UNKNOWN', {evidence = evidence})
  return reply('OK')
end
if result ~= 'SUCCEEDED' and result ~= 'FAILED' and result ~= 'NEEDS_RECONCILIATION' then
  return reply('ERR_ARGUMENT')
end
redis.call('HSET', card_key, 'reference', ARGV[3], 'evidence', ARGV[4])
transition(now, 'reconciled', 'reconciler', result, {evidence = evidence, reference = ARGV[3]})
if result == 'NEEDS_RECONCILIATION' then redis.call('ZREM', timers_key, c.card_id) else close(c) end
return reply('OK')
""",
    # ARGV: tid, admin, outcome (SUCCEEDED|FAILED), evidence json
    "resolve": """
local again = replayed(); if again then return again end
local c = card()
if not c.card_id then return reply('ERR_NOT_FOUND') end
if c.state ~= 'NEEDS_RECONCILIATION' then return reply('ERR_STATE') end
if ARGV[3] ~= 'SUCCEEDED' and ARGV[3] ~= 'FAILED' then return reply('ERR_ARGUMENT') end
local now = now_ms()
redis.call('HSET', card_key, 'evidence', ARGV[4], 'resolved_by', ARGV[2])
transition(now, 'resolved', ARGV[2], ARGV[3], {evidence = cjson.decode(ARGV[4])})
close(c)
return reply('OK')
""",
}
