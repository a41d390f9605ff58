--[[ restore: rebuild a shard's lost state from the history store (`sched recover`). Safe to
  run again: nothing that exists is overwritten.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  nj              number of jobs; then per job:
           job_id, cron_ms (the recurring job's watermark, -1 when it does not recur),
           f (number of fields), then f field/value pairs of the job hash
  then     ns              number of slots; then per slot:
           slot_id, f, then f field/value pairs of the slot hash (status not terminal)

  A job hash is written only when absent; a cron watermark only when the job has none
  (ZADD NX). A slot is written only when its hash is absent, then re-dispatched:
  scheduled -> `due` at its available time; queued -> a new dispatch-stream entry; running ->
  its attempt is archived with outcome "lost" (the host that held its lease is gone), its
  key's permit removed if one was left (_lib.lua's run_member, of either form: it would let
  the lost attempt's commit through complete.lua's fence), and the slot is dispatched
  again, except at_most_once slots, which end `lost`, and slots whose
  cancellation was requested, which end `cancelled`.

  Reply: {jobs restored, cron watermarks restored, slots scheduled, slots dispatched,
          slots ended}

  Event: "recovered" {slot, status}.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]

--- @include "_lib.lua"

local b = 3
local jobs, crons, scheduled, dispatched, ended = 0, 0, 0, 0, 0
local records = {}

for _ = 1, tonumber(ARGV[3]) do
  local job_id, cron_ms, f = ARGV[b + 1], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local first, last = b + 4, b + 3 + 2 * f
  b = last
  local job_key = prefix .. 'job:' .. job_id
  if f > 0 and redis.call('EXISTS', job_key) == 0 then
    redis.call('HSET', job_key, unpack(ARGV, first, last))
    jobs = jobs + 1
  end
  if cron_ms >= 0 then
    crons = crons + redis.call('ZADD', prefix .. 'cron', 'NX', cron_ms, job_id)
  end
end

b = b + 1
for _ = 1, tonumber(ARGV[b]) do
  local slot_id, f = ARGV[b + 1], tonumber(ARGV[b + 2])
  local first, last = b + 3, b + 2 + 2 * f
  b = last
  local slot_key = prefix .. 'slot:' .. slot_id
  if redis.call('EXISTS', slot_key) == 0 then
    redis.call('HSET', slot_key, unpack(ARGV, first, last))
    local st = redis.call('HMGET', slot_key, 'status', 'queue', 'available_ms', 'fire_ms',
      'attempt', 'worker', 'claimed_ms', 'lease_until', 'job_id', 'cancel', 'priority',
      'concurrency_key')
    local status = st[1]
    if status == 'scheduled' then
      redis.call('ZADD', prefix .. 'due', tonumber(st[3]) or tonumber(st[4]), slot_id)
      scheduled = scheduled + 1
    elseif status == 'queued' then
      dispatch(prefix, slot_key, slot_id, lane(st[2], st[11]), now)
      dispatched = dispatched + 1
    elseif status == 'running' then
      local s = {attempt = tonumber(st[5]), worker = st[6], claimed_ms = tonumber(st[7]),
        lease_until = tonumber(st[8])}
      local record = attempt_record(s, 'lost', nil, now,
        'the queue host was lost during this attempt; recovered from history')
      redis.call('HSET', slot_key, 'a:' .. st[5], record)
      if st[12] then  -- the attempt ends here: a member of it left over would fence it in
        redis.call('ZREM', queue_running(prefix, st[2]), run_member(st[12], slot_id, st[5]))
        redis.call('ZREM', older_running(prefix, st[2], st[12]), slot_id,
          older_member(slot_id, st[5]))
      end
      local delivery = redis.call('HGET', prefix .. 'job:' .. st[9], 'delivery')
      if st[10] then
        redis.call('HSET', slot_key, 'status', 'cancelled', 'finished_ms', now)
        index_finished(prefix, slot_id, now)
        ended = ended + 1
      elseif delivery == 'at_most_once' then
        redis.call('HSET', slot_key, 'status', 'lost', 'finished_ms', now)
        index_finished(prefix, slot_id, now)
        ended = ended + 1
      else
        dispatch(prefix, slot_key, slot_id, lane(st[2], st[11]), now)
        dispatched = dispatched + 1
      end
    end
    records[#records + 1] = {slot = slot_id, status = redis.call('HGET', slot_key, 'status')}
  end
end

emit(prefix, maxlen, now, 'recovered', records, nil)
return {jobs, crons, scheduled, dispatched, ended}
