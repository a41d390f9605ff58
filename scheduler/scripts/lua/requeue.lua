--[[ requeue: hand back stream entries a worker read but never claimed (a stopping worker's
  local backlog), so they need not wait for the reclaimer.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  n               number of entries; then 3 fields per entry: lane (the queue's
                           dispatch stream the entry is in, keys.lane), msg_id, slot_id

  An entry whose slot is still `queued` under it is acked and the slot dispatched under a new
  entry (any worker may read it); any other entry is just acked, as claim would.

  Reply: the number of slots dispatched again.

  Event: "redispatched" {slot}.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local n = tonumber(ARGV[3])

--- @include "_lib.lua"

local records = {}
for i = 0, n - 1 do
  local b = 3 + i * 3
  local queue, msg, slot_id = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3]
  local slot_key = prefix .. 'slot:' .. slot_id
  local st = redis.call('HMGET', slot_key, 'status', 'msg')
  ack(prefix, queue, msg)
  if st[1] == 'queued' and st[2] == msg then
    dispatch(prefix, slot_key, slot_id, queue, now)
    records[#records + 1] = {slot = slot_id}
  end
end

emit(prefix, maxlen, now, 'redispatched', records, nil)
return #records
