--[[ replay: give dead slots a new life (dead -> queued): a new attempt of the same slot,
  never a second slot. The failure count starts again, so the job's max_attempts apply anew.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  n               number of slots; then n slot ids

  Reply: one code per slot (R, replies.py): R.OK replayed (dispatched under a new stream
  entry); R.MISSING not a dead slot in this shard's dead-letter set (nothing changed).

  Event: "replayed" {slot, attempt}.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local n = tonumber(ARGV[3])

--- @include "_lib.lua"

local reply = {}
local replayed = {}
for i = 1, n do
  local slot_id = ARGV[3 + i]
  local slot_key = prefix .. 'slot:' .. slot_id
  local st = redis.call('HMGET', slot_key, 'status', 'queue', 'attempt', 'priority')
  if st[1] == 'dead' and redis.call('ZREM', prefix .. 'dlq', slot_id) == 1 then
    redis.call('HSET', slot_key, 'failures', 0)
    redis.call('HDEL', slot_key, 'finished_ms')
    dispatch(prefix, slot_key, slot_id, lane(st[2], st[4]), now)
    reply[i] = R.OK
    replayed[#replayed + 1] = {slot = slot_id, attempt = tonumber(st[3])}
  else
    reply[i] = R.MISSING
  end
end

emit(prefix, maxlen, now, 'replayed', replayed, nil)
return reply
