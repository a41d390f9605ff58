--[[ promote: move due slots to their dispatch streams (scheduled -> queued).

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  limit           at most this many slots per call

  Slots in `due` whose score is <= now are taken in score order. A slot that is no longer
  `scheduled` (cancelled, or gone) is only removed from `due`.

  Reply: {promoted, next_due_ms}: how many slots were dispatched, and the score of the
  earliest slot still in `due` (-1 when empty), so the caller can sleep until then.

  Event: "queued" {slot, available_ms}.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local limit = tonumber(ARGV[3])

--- @include "_lib.lua"

local due = prefix .. 'due'
local ids = redis.call('ZRANGE', due, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
local records = {}
for i = 1, #ids, 2 do
  local slot_id = ids[i]
  local slot_key = prefix .. 'slot:' .. slot_id
  local st = redis.call('HMGET', slot_key, 'status', 'queue')
  if st[1] == 'scheduled' then
    local msg = redis.call('XADD', prefix .. 'q:' .. st[2], '*', 's', slot_id)
    redis.call('HSET', slot_key, 'status', 'queued', 'msg', msg)
    records[#records + 1] = {slot = slot_id, available_ms = tonumber(ids[i + 1])}
  end
  redis.call('ZREM', due, slot_id)
end

emit(prefix, maxlen, now, 'queued', records, nil)
local head = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
local next_due = -1
if #head > 0 then next_due = tonumber(head[2]) end
return {#records, next_due}
