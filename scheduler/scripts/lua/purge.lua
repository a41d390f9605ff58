--[[ purge: drop slots from the dead-letter set. The slot itself stays, `dead`, with its
  attempts, so its history is still there to read.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  n               number of slots; then n slot ids

  Reply: one code per slot (R, replies.py): R.OK removed from the dead-letter set;
  R.MISSING it was not there.

  Event: "purged" {slot}.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local n = tonumber(ARGV[3])

--- @include "_lib.lua"

local reply = {}
local purged = {}
for i = 1, n do
  local slot_id = ARGV[3 + i]
  if redis.call('ZREM', prefix .. 'dlq', slot_id) == 1 then
    reply[i] = R.OK
    index_finished(prefix, slot_id, now)  -- no longer held for the operator
    purged[#purged + 1] = {slot = slot_id}
  else
    reply[i] = R.MISSING
  end
end

emit(prefix, maxlen, now, 'purged', purged, nil)
return reply
