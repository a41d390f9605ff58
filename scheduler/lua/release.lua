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

  Events: "released" {slot, attempt}, "refused" {slot, token, status, current_token}.
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
    record_attempt(slot_key, s, token, 'released', ARGV[b + 3], now, 'worker shut down')
    drop_entry(prefix, s.queue, s.msg)
    local msg = redis.call('XADD', prefix .. 'q:' .. s.queue, '*', 's', slot_id)
    redis.call('HSET', slot_key, 'status', 'queued', 'msg', msg, 'available_ms', now,
      'lease_until', '')
    reply[#reply + 1] = 1
    released[#released + 1] = {slot = slot_id, attempt = s.attempt}
  else
    reply[#reply + 1] = 0
    refused[#refused + 1] = {slot = slot_id, token = tonumber(token), status = st[1] or 'missing',
      current_token = tonumber(st[2]), outcome = 'released'}
  end
end

emit(prefix, maxlen, now, 'released', released, worker)
emit(prefix, maxlen, now, 'refused', refused, worker)
return reply
