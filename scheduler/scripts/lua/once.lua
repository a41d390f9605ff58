--[[ once: record that a named side effect of a slot happened, at most once per slot
  (`await ctx.once(name)` for exactly_once handlers). Not a state transition: no event.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  slot_id
  ARGV[2]  token           the attempt number the caller holds
  ARGV[3]  name            the side effect's name, chosen by the handler

  Reply (R, replies.py): R.OK first time: recorded now (go ahead with the effect);
  R.DONE_BEFORE recorded by an earlier attempt (skip it); R.REPEAT recorded by this very
  attempt (the worker asked again because the first reply was lost: then it is this
  attempt's to do; a handler asking twice is told no the second time); R.STALE the caller's
  lease is gone (stop; the slot was reclaimed).
]]
local prefix = KEYS[1]
local slot_key = prefix .. 'slot:' .. ARGV[1]

local st = redis.call('HMGET', slot_key, 'status', 'attempt')
if st[1] ~= 'running' or st[2] ~= ARGV[2] then return R.STALE end
local field = 'once:' .. ARGV[3]
if redis.call('HSETNX', slot_key, field, ARGV[2]) == 1 then return R.OK end
if redis.call('HGET', slot_key, field) == ARGV[2] then return R.REPEAT end
return R.DONE_BEFORE
