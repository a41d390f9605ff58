--[[ cancel: cancel slots (scheduled | queued -> cancelled; running -> cancel requested).

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  reason          one line for people, recorded on the slot
  ARGV[4]  n               number of slots; then n slot ids

  A running slot cannot be stopped from here: the flag `cancel` is set, the worker's next
  heartbeat reply tells it to cancel the handler, and it commits outcome "cancelled". If the
  worker is gone, the reclaimer ends the slot `cancelled` when the lease expires. A run that
  finishes before its worker hears of the request commits normally.

  Reply: one code per slot (R, replies.py): R.CANCELLED cancelled; R.CANCEL_REQUESTED
  (running: the worker stops it); R.TERMINAL already ended (nothing changed); R.MISSING no
  such slot.

  Events: "cancelled" {slot, reason}, "cancel_requested" {slot, attempt, reason}.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local reason = ARGV[3]
local n = tonumber(ARGV[4])

--- @include "_lib.lua"

local reply = {}
local cancelled, requested = {}, {}
for i = 1, n do
  local slot_id = ARGV[4 + i]
  local slot_key = prefix .. 'slot:' .. slot_id
  local st = redis.call('HMGET', slot_key, 'status', 'msg', 'queue', 'attempt', 'priority')
  if not st[1] then
    reply[i] = R.MISSING
  elseif st[1] == 'scheduled' or st[1] == 'queued' then
    redis.call('ZREM', prefix .. 'due', slot_id)
    if st[1] == 'queued' then ack(prefix, lane(st[3], st[5]), st[2]) end
    redis.call('HSET', slot_key, 'status', 'cancelled', 'finished_ms', now, 'cancel', reason)
    index_finished(prefix, slot_id, now)
    reply[i] = R.CANCELLED
    cancelled[#cancelled + 1] = {slot = slot_id, reason = reason}
  elseif st[1] == 'running' then
    redis.call('HSET', slot_key, 'cancel', reason)
    reply[i] = R.CANCEL_REQUESTED
    requested[#requested + 1] = {slot = slot_id, attempt = tonumber(st[4]), reason = reason}
  else
    reply[i] = R.TERMINAL
  end
end

emit(prefix, maxlen, now, 'cancelled', cancelled, nil)
emit(prefix, maxlen, now, 'cancel_requested', requested, nil)
return reply
