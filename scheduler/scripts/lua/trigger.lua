--[[ trigger: one extra run of a job now, beside its schedule: a new slot
  `<job_id>:<fire_ms>` (fire_ms = now, moved on by 1 ms while a slot of that time exists),
  dispatched at once, like a cron occurrence (the job's queue, task and overlap).

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  job_id

  Reply (R, replies.py): {R.OK, slot_id}; {R.MISSING, ""} no such job; {R.TERMINAL, ""} the
  job was deleted (delete_job.lua).

  Event: "triggered" {job, slot} (the slot hash says it is queued).
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local job_id = ARGV[3]

--- @include "_lib.lua"

local job = redis.call('HMGET', prefix .. 'job:' .. job_id, 'task', 'queue', 'overlap',
  'deleted_ms', 'priority', 'concurrency_key')
if not job[1] then return {R.MISSING, ''} end
if job[4] then return {R.TERMINAL, ''} end
local queue = job[2] or 'default'

local fire = now
local slot_id, slot_key
repeat
  slot_id = job_id .. ':' .. string.format('%d', fire)
  slot_key = prefix .. 'slot:' .. slot_id
  fire = fire + 1
until redis.call('EXISTS', slot_key) == 0
fire = fire - 1

redis.call('HSET', slot_key, 'job_id', job_id, 'fire_ms', string.format('%d', fire),
  'status', 'scheduled', 'queue', queue, 'task', job[1], 'msg', '', 'triggered', now)
if job[3] == 'skip' then redis.call('HSET', slot_key, 'overlap', 'skip') end
if job[5] then redis.call('HSET', slot_key, 'priority', job[5]) end
if job[6] then redis.call('HSET', slot_key, 'concurrency_key', job[6]) end
redis.call('ZADD', prefix .. 'runs:' .. job_id, fire, slot_id)
emit(prefix, maxlen, now, 'triggered', {{job = job_id, slot = slot_id}}, nil)
dispatch(prefix, slot_key, slot_id, lane(queue, job[5]), now)
return {R.OK, slot_id}
