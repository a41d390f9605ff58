--[[ release: hand running slots back (running -> queued, or lost for at_most_once), fenced
  by token. Used by a worker shutting down whose grace period ran out. The attempt is recorded
  with outcome "released" and does not count as a failure. An at_most_once slot that was
  started may have had effects, so it is not re-run: it ends `lost`.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  worker_id
  ARGV[4]  n               number of slots; then 3 fields per slot: slot_id, token, started_ms

  Reply: one code per slot (R, replies.py): R.OK re-dispatched under a new stream entry;
  R.LOST ended lost (at_most_once); R.STALE refused (not running under this token; nothing
  changed but the refusal event).

  Events: "released" {slot, attempt}, "lost" {slot, attempt}, "refused" {slot, token, status,
  current_token, outcome}.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local worker = ARGV[3]
local n = tonumber(ARGV[4])

--- @include "_lib.lua"

local reply = {}
local released, lost, refused = {}, {}, {}
for i = 0, n - 1 do
  local b = 4 + i * 3
  local slot_id, token = ARGV[b + 1], ARGV[b + 2]
  local slot_key = prefix .. 'slot:' .. slot_id
  local s, st = leased(slot_key, token)
  if not s then
    reply[i + 1] = R.STALE
    refused[#refused + 1] = refusal(slot_id, token, st, 'released')
  else
    end_lease(prefix, slot_id, s)
    local delivery = redis.call('HGET', prefix .. 'job:' .. s.job_id, 'delivery')
    if delivery == 'at_most_once' then
      redis.call('HSET', slot_key, 'status', 'lost', 'finished_ms', now, 'a:' .. token,
        attempt_record(s, 'lost', ARGV[b + 3], now, 'worker shut down mid-run (at_most_once: not re-run)'))
      index_finished(prefix, slot_id, now)
      reply[i + 1] = R.LOST
      lost[#lost + 1] = {slot = slot_id, attempt = s.attempt}
    else
      redis.call('HSET', slot_key, 'a:' .. token,
        attempt_record(s, 'released', ARGV[b + 3], now, 'worker shut down'))
      dispatch(prefix, slot_key, slot_id, s.lane, now)
      reply[i + 1] = R.OK
      released[#released + 1] = {slot = slot_id, attempt = s.attempt}
    end
  end
end

emit(prefix, maxlen, now, 'released', released, worker)
emit(prefix, maxlen, now, 'lost', lost, worker)
emit(prefix, maxlen, now, 'refused', refused, worker)
return reply
