"""The ledger's Lua scripts: one atomic script per card transition, each run after the shared
prelude (`gateway.store.ledger.prelude`).

Storage, chosen for size (see bench/README.md): a card is one string (MessagePack), which holds its own
history (``events``) and the ids of the latest transitions applied to it (``applied``), both
bounded (`gateway.store.ledger.history`). It is stored compactly (`gateway.store.ledger.codec`);
the scripts see it expanded, every scalar value a string. Each script loads the card, checks every
guard before its first write, then changes the card, records its event and saves it: one key per
card.

Which script may start from which state, ends in which, for whom and behind which guards is the
table `gateway.cards.transitions.TRANSITIONS`, one row per script of the same name;
tests/test_transitions.py runs every script from every state and holds it to that table.
"""

from __future__ import annotations

__all__ = ["SCRIPTS"]

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
    # ARGV: tid, approver, version, args_hash, comment, requeue_ms; an approver ``policy:<rule>`` also
    # gives its daily budget (ARGV 7) and KEYS 9, the requester's count of policy approvals that day.
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
