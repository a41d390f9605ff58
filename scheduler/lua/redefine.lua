--[[ redefine: replace a named schedule's definition (Client.schedule with a changed spec),
  from its next occurrence, with a compare-and-set on the definition it replaces.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  job_id
  ARGV[4]  expected        the `spec` digest the caller read; nothing happens unless the
                           job's is still exactly this ("" for none)
  ARGV[5]  next_ms         the new definition's first occurrence after now: the watermark
  ARGV[6]  fields          msgpack array: the new job hash, field/value pairs (task and queue
                           among them), `spec` its digest

  The job hash is rewritten (its created_ms kept, redefined_ms set; a deleted job is a series
  again). Occurrences the old definition had materialized ahead (slots still `scheduled`,
  fire time after now) are removed, hash and all: they never ran, and the materializer
  creates the new definition's occurrences from next_ms (at the same times too). Slots due,
  queued or running go on as they were.

  Reply (R, replies.py): {R.OK, removed}; {R.MOVED, 0} the definition changed meanwhile
  (another process redefined it) or the job is not a recurring one; {R.MISSING, 0} no job.
  An error reply "INVALID <problem>; nothing was written" for a task or queue name that
  submit.lua would refuse (a control character in the task name, a queue name that cannot
  be part of a key).

  Events: "redefined" {job}, and "cancelled" {slot, reason} per removed occurrence (history
  shows it cancelled until the same slot id is created again).
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local job_id = ARGV[3]
local expected = ARGV[4]
local next_ms = ARGV[5]
local fields = cmsgpack.unpack(ARGV[6])

--- @include "_lib.lua"

-- The new task and queue names, checked as submit.lua checks them (a direct caller's).
for i = 1, #fields, 2 do
  local problem = fields[i] == 'task' and task_problem(fields[i + 1])
    or fields[i] == 'queue' and not name_ok(fields[i + 1], 64) and 'malformed queue name'
  if problem then return redis.error_reply('INVALID ' .. problem .. '; nothing was written') end
end

local job_key = prefix .. 'job:' .. job_id
local cur = redis.call('HMGET', job_key, 'spec', 'created_ms', 'kind')
if not cur[2] then return {R.MISSING, 0} end
if (cur[1] or '') ~= expected or cur[3] ~= 'cron' then return {R.MOVED, 0} end

local runs = prefix .. 'runs:' .. job_id
local removed = {}
for _, slot_id in ipairs(redis.call('ZRANGEBYSCORE', runs, '(' .. ARGV[1], '+inf')) do
  local slot_key = prefix .. 'slot:' .. slot_id
  if redis.call('HGET', slot_key, 'status') == 'scheduled' then
    redis.call('ZREM', prefix .. 'due', slot_id)
    redis.call('ZREM', runs, slot_id)
    redis.call('DEL', slot_key)
    removed[#removed + 1] = {slot = slot_id, reason = 'redefined'}
  end
end

redis.call('DEL', job_key)
redis.call('HSET', job_key, 'fire_ms', next_ms, 'created_ms', cur[2], 'redefined_ms', now,
  unpack(fields))
redis.call('ZADD', prefix .. 'cron', next_ms, job_id)
emit(prefix, maxlen, now, 'cancelled', removed, nil)
emit(prefix, maxlen, now, 'redefined', {{job = job_id}}, nil)
return {R.OK, #removed}
