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
                           among them), `spec` its digest. The digest is the definition's
                           version: materialize.lua refuses occurrences computed from another,
                           so a node that kept the old definition reads the new one
  ARGV[7]  k               optional (default 0): how many fire_ms values follow: the old
                           definition's occurrences from its watermark to now, computed by the
                           caller from the definition it read (ledger.unmade). Those still at
                           or past the watermark without a slot (no node made them: every node
                           was down or behind) are dropped by the new watermark, and written
                           to the fire ledger as "<fire_ms>:redefined"

  The job hash is rewritten (its created_ms, and the series' `active` slot and `missed` count
  kept; redefined_ms set; a deleted job is a series again). The old definition's occurrences
  after now that have not started are withdrawn: they end `cancelled` (reason "redefined",
  and `redefined_ms` set, the mark materialize.lua reads to make the new definition's
  occurrence at the same time under the same slot id). They are
  - slots still `scheduled`: they leave `due`;
  - slots `queued` ahead of their time (promote.lua, "Early": `nb` after now): their dispatch
    entry is acked and deleted, so no worker claims it or keeps the old job fields it carries
    (reader.py); a worker that read it already has its claim answered R.STALE. None of them
    has started: claim.lua refuses a slot before its nb (R.EARLY), and this script runs
    between claims, never during one.
  Their hashes stay (history reads the cancellation there, as for cancel.lua's), and each is
  written to the job's fire ledger `fires:<job_id>` as "<fire_ms>:redefined" (_lib.lua's
  note_fires: the new definition may take the slot id over), and all go out as one
  `not_run` event (the history store's copy of the ledger). Slots due
  by now (fire time <= now: scheduled, queued or running) go on as they were.

  Reply (R, replies.py): {R.OK, scheduled, queued} how many occurrences of each kind were
  withdrawn; {R.MOVED, 0, 0} the definition changed meanwhile (another process redefined it)
  or the job is not a recurring one; {R.MISSING, 0, 0} no job.
  An error reply "INVALID <problem>; nothing was written" for a task or queue name that
  submit.lua would refuse (a control character in the task name, a queue name that cannot
  be part of a key).

  Events: "redefined" {job}, and "cancelled" {slot, reason = "redefined"} per withdrawn
  occurrence.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local job_id = ARGV[3]
local expected = ARGV[4]
local next_ms = ARGV[5]
local fields = cmsgpack.unpack(ARGV[6])
local k = tonumber(ARGV[7]) or 0

--- @include "_lib.lua"

-- The new task and queue names, checked as submit.lua checks them (a direct caller's).
for i = 1, #fields, 2 do
  local problem = fields[i] == 'task' and task_problem(fields[i + 1])
    or fields[i] == 'queue' and not name_ok(fields[i + 1], 64) and 'malformed queue name'
  if problem then return redis.error_reply('INVALID ' .. problem .. '; nothing was written') end
end

local job_key = prefix .. 'job:' .. job_id
local cur = redis.call('HMGET', job_key, 'spec', 'created_ms', 'kind', 'active', 'missed')
if not cur[2] then return {R.MISSING, 0, 0} end
if (cur[1] or '') ~= expected or cur[3] ~= 'cron' then return {R.MOVED, 0, 0} end

local runs = prefix .. 'runs:' .. job_id
local withdrawn, gone, scheduled, queued = {}, {}, 0, 0
for _, slot_id in ipairs(redis.call('ZRANGEBYSCORE', runs, '(' .. ARGV[1], '+inf')) do
  local slot_key = prefix .. 'slot:' .. slot_id
  local st = redis.call('HMGET', slot_key, 'status', 'nb', 'msg', 'queue', 'priority')
  local ahead = false
  if st[1] == 'scheduled' then
    redis.call('ZREM', prefix .. 'due', slot_id)
    scheduled, ahead = scheduled + 1, true
  elseif st[1] == 'queued' and (tonumber(st[2]) or 0) > now then
    local lane_name = lane(st[4], st[5])
    if st[3] and st[3] ~= '' then
      ack(prefix, lane_name, st[3])
      redis.call('XDEL', prefix .. 'q:' .. lane_name, st[3])
    end
    queued, ahead = queued + 1, true
  end
  if ahead then
    redis.call('HSET', slot_key, 'status', 'cancelled', 'finished_ms', now, 'cancel',
      'redefined', 'redefined_ms', now)
    index_finished(prefix, slot_id, now)
    withdrawn[#withdrawn + 1] = {slot = slot_id, reason = 'redefined'}
    gone[#gone + 1] = slot_id
  end
end
-- for the not_run event, read before the watermark moves (note_fires changes no slot)
local unmade = unmade_fires(prefix, job_id, {unpack(ARGV, 8, 7 + k)})
note_fires(prefix, job_id, gone, 'redefined')
note_fires(prefix, job_id, unmade_fires(prefix, job_id, {unpack(ARGV, 8, 7 + k)}), 'redefined')

redis.call('DEL', job_key)
redis.call('HSET', job_key, 'fire_ms', next_ms, 'created_ms', cur[2], 'redefined_ms', now,
  unpack(fields))
if cur[4] then redis.call('HSET', job_key, 'active', cur[4]) end
if cur[5] then redis.call('HSET', job_key, 'missed', cur[5]) end
redis.call('ZADD', prefix .. 'cron', next_ms, job_id)
emit(prefix, maxlen, now, 'cancelled', withdrawn, nil)
emit(prefix, maxlen, now, 'redefined', {{job = job_id}}, nil)
emit(prefix, maxlen, now, 'not_run', not_run_records(job_id, 'redefined', gone, unmade), nil)
return {R.OK, scheduled, queued}
