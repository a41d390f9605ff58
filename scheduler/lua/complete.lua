--[[ complete: commit a batch of successes (running -> succeeded), fenced by token.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  worker_id
  ARGV[4]  n               number of slots; then 4 fields per slot:
           slot_id, token, started_ms, finished_ms

  Reply: one integer per slot, in order
     1  committed: status succeeded, attempt recorded, stream entry acked and deleted
     0  refused: the slot is not running under this token (the lease was lost and the slot
        reclaimed, cancelled or already finished); nothing changed but the refusal event

  Events: "succeeded" (records {slot, attempt, token}) and "refused" (records {slot, token,
  status, current_token}), each only when non-empty.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local worker = ARGV[3]
local n = tonumber(ARGV[4])

--- @include "_lib.lua"

local reply = {}
local done, refused = {}, {}
for i = 0, n - 1 do
  local b = 4 + i * 4
  local slot_id, token = ARGV[b + 1], ARGV[b + 2]
  local slot_key = prefix .. 'slot:' .. slot_id
  local s, st = leased(slot_key, token)
  if s then
    record_attempt(slot_key, s, token, 'succeeded', ARGV[b + 3], ARGV[b + 4], nil)
    redis.call('HSET', slot_key, 'status', 'succeeded', 'finished_ms', now, 'msg', '',
      'lease_until', '')
    drop_entry(prefix, s.queue, s.msg)
    reply[#reply + 1] = 1
    done[#done + 1] = {slot = slot_id, attempt = s.attempt, token = tonumber(token)}
  else
    reply[#reply + 1] = 0
    refused[#refused + 1] = {slot = slot_id, token = tonumber(token), status = st[1] or 'missing',
      current_token = tonumber(st[2]), outcome = 'succeeded'}
  end
end

emit(prefix, maxlen, now, 'succeeded', done, worker)
emit(prefix, maxlen, now, 'refused', refused, worker)
return reply
