--[[ submit: create jobs with their first slot, and dispatch or schedule each, atomically.

  One call handles a batch of jobs that all live in one shard.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:" (job, slot, due, queue and events keys below it)

  ARGV[1]  now_ms          Redis time in ms, read by the caller
  ARGV[2]  events_maxlen   approximate cap of the shard's events stream
  ARGV[3]  n               number of jobs; then 13 fields per job:
           job_id, task, queue, payload, timeout_ms, max_attempts, backoff_base_ms,
           backoff_max_ms, jitter, delivery, dedupe_key, kind, fire_ms

  Reply: one integer per job, in order
     1  created: job hash, slot hash, and a dispatch-stream entry (fire_ms <= now) or a
        `due` entry (fire_ms > now)
     0  the job id already existed (a dedupe key repeated); nothing was written

  Event: type "submitted", one record per created job.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local n = tonumber(ARGV[3])
local F = 13

local reply = {}
local records = {}
for i = 0, n - 1 do
  local b = 3 + i * F
  local job_id, task, queue = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3]
  local fire = tonumber(ARGV[b + 13])
  local job_key = prefix .. 'job:' .. job_id
  if redis.call('EXISTS', job_key) == 1 then
    reply[#reply + 1] = 0
  else
    redis.call('HSET', job_key,
      'task', task, 'queue', queue, 'payload', ARGV[b + 4], 'timeout_ms', ARGV[b + 5],
      'max_attempts', ARGV[b + 6], 'backoff_base_ms', ARGV[b + 7],
      'backoff_max_ms', ARGV[b + 8], 'jitter', ARGV[b + 9], 'delivery', ARGV[b + 10],
      'dedupe_key', ARGV[b + 11], 'kind', ARGV[b + 12], 'fire_ms', fire, 'created_ms', now)
    local slot_id = job_id .. ':' .. ARGV[b + 13]
    local slot_key = prefix .. 'slot:' .. slot_id
    local status
    if fire <= now then
      status = 'queued'
      local msg = redis.call('XADD', prefix .. 'q:' .. queue, '*', 's', slot_id)
      redis.call('HSET', slot_key, 'job_id', job_id, 'fire_ms', fire, 'status', status,
        'queue', queue, 'task', task, 'attempt', 0, 'failures', 0, 'token', 0,
        'available_ms', now, 'msg', msg)
    else
      status = 'scheduled'
      redis.call('ZADD', prefix .. 'due', fire, slot_id)
      redis.call('HSET', slot_key, 'job_id', job_id, 'fire_ms', fire, 'status', status,
        'queue', queue, 'task', task, 'attempt', 0, 'failures', 0, 'token', 0,
        'available_ms', fire, 'msg', '')
    end
    reply[#reply + 1] = 1
    records[#records + 1] = {slot = slot_id, task = task, queue = queue, fire_ms = fire,
      status = status}
  end
end

if #records > 0 then
  redis.call('XADD', prefix .. 'events', 'MAXLEN', '~', maxlen, '*',
    'type', 'submitted', 'ts', now, 'data', cjson.encode(records))
end
return reply
