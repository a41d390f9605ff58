--[[ delete_job: end a job's series. A recurring job leaves the shard's `cron` set, so no
  occurrence is created after this (a materializer that read the old watermark is refused by
  materialize.lua's compare-and-set), and every slot of the job that has not started
  (`scheduled`, `queued`) is cancelled. A running slot is left to finish and commit as usual.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  job_id
  ARGV[4]  reason          one line for people, recorded on the job and the cancelled slots
  ARGV[5]  k               optional (default 0): how many fire_ms values follow: a recurring
                           job's occurrences from its watermark to now, computed by the caller
                           (ledger.unmade); those still at or past the watermark without a slot
                           (no node made them) are written to the fire ledger as deleted

  The job hash stays (history and `jobs show` still find it) with `deleted_ms` and `deleted`
  (the reason) set; its slots stay indexed in `runs:<job_id>`. A recurring job's cancelled
  occurrences are written to its fire ledger `fires:<job_id>` as "<fire_ms>:deleted"
  (_lib.lua's note_fires), and go out as one `not_run` event (the history store's copy).

  Reply (R, replies.py): {R.OK, cancelled, running} the job was ended now: how many slots were
  cancelled and how many are still running; {R.TERMINAL, 0, 0} it was deleted before;
  {R.MISSING, 0, 0} no such job.

  Events: "deleted" {job, reason}, and "cancelled" {slot, reason} per cancelled slot.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local job_id = ARGV[3]
local reason = ARGV[4]
local k = tonumber(ARGV[5]) or 0

--- @include "_lib.lua"

local job_key = prefix .. 'job:' .. job_id
local job = redis.call('HMGET', job_key, 'task', 'deleted_ms', 'fire_ms', 'kind')
if not job[1] then return {R.MISSING, 0, 0} end
if job[2] then return {R.TERMINAL, 0, 0} end

local unmade = unmade_fires(prefix, job_id, {unpack(ARGV, 6, 5 + k)})
redis.call('ZREM', prefix .. 'cron', job_id)
redis.call('HSET', job_key, 'deleted_ms', now, 'deleted', reason)

-- A recurring job's slots are indexed in runs:<job_id>; any other job has its one slot.
local slots = redis.call('ZRANGE', prefix .. 'runs:' .. job_id, 0, -1)
if #slots == 0 then slots = {job_id .. ':' .. job[3]} end
local cancelled, gone, running = {}, {}, 0
for _, slot_id in ipairs(slots) do
  local slot_key = prefix .. 'slot:' .. slot_id
  local st = redis.call('HMGET', slot_key, 'status', 'msg', 'queue', 'priority')
  if st[1] == 'scheduled' or st[1] == 'queued' then
    redis.call('ZREM', prefix .. 'due', slot_id)
    if st[1] == 'queued' then ack(prefix, lane(st[3], st[4]), st[2]) end
    redis.call('HSET', slot_key, 'status', 'cancelled', 'finished_ms', now, 'cancel', reason)
    index_finished(prefix, slot_id, now)
    cancelled[#cancelled + 1] = {slot = slot_id, reason = reason}
    gone[#gone + 1] = slot_id
  elseif st[1] == 'running' then
    running = running + 1
  end
end

if job[4] == 'cron' then
  note_fires(prefix, job_id, gone, 'deleted')
  note_fires(prefix, job_id, unmade, 'deleted')
  emit(prefix, maxlen, now, 'not_run', not_run_records(job_id, 'deleted', gone, unmade), nil)
end
emit(prefix, maxlen, now, 'deleted', {{job = job_id, reason = reason}}, nil)
emit(prefix, maxlen, now, 'cancelled', cancelled, nil)
return {R.OK, #cancelled, running}
