--[[ release: hand running slots back for redelivery (running -> queued), fenced by token.
  Used by a worker shutting down whose grace period ran out. The attempt is recorded with
  outcome "released" and does not count as a failure.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  worker_id
  ARGV[4]  n               number of slots; then 3 fields per slot: slot_id, token, started_ms

  Reply: one integer per slot: 1 re-dispatched under a new stream entry, 0 refused (not
  running under this token; nothing changed but the refusal event).

  Events: "released" {slot, attempt}, "refused" {slot, token, status, current_token, outcome}.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local worker = ARGV[3]
local n = tonumber(ARGV[4])

--- @include "_lib.lua"

local reply = {}
local released, refused = {}, {}
for i = 0, n - 1 do
  local b = 4 + i * 3
  local slot_id, token = ARGV[b + 1], ARGV[b + 2]
  local slot_key = prefix .. 'slot:' .. slot_id
  local s, st = leased(slot_key, token)
  if s then
    ack(prefix, s.queue, s.msg)
    local msg = redis.call('XADD', prefix .. 'q:' .. s.queue, '*', 's', slot_id)
    redis.call('HSET', slot_key, 'status', 'queued', 'msg', msg, 'available_ms', now,
      'a:' .. token, attempt_record(s, 'released', ARGV[b + 3], now, 'worker shut down'))
    reply[i + 1] = 1
    released[#released + 1] = {slot = slot_id, attempt = s.attempt}
  else
    reply[i + 1] = 0
    refused[#refused + 1] = refusal(slot_id, token, st, 'released')
  end
end

emit(prefix, maxlen, now, 'released', released, worker)
emit(prefix, maxlen, now, 'refused', refused, worker)
return reply
