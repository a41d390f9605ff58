--[[ submit: create jobs with their first slot, and dispatch or schedule each, atomically.

  One call handles a batch of jobs that all live in one shard.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:" (job, slot, due, queue and events keys below it)

  ARGV[1]  now_ms          Redis time in ms, read by the caller
  ARGV[2]  events_maxlen   approximate cap of the shard's events stream
  ARGV[3]  n               number of jobs
  ARGV[4]  jobs            msgpack array (strings and numbers; see calls.pack), per job:
           job_id, task, queue, fire_ms, f (number of job-hash fields), then f field/value
           pairs for the job hash (only fields that differ from their defaults)
  ARGV[5]  fresh           optional; "1": the caller drew every job id of this call afresh
           (jobspec.py: UUIDv7s, 74 random bits each) for this call alone, so no other call
           can hold one of them and only this very call, sent again (redis-py resends a
           pipeline whose reply was lost), can find them written. One marker key
           `<prefix>submitted:<first job id>` (expiring after SUBMITTED_TTL_MS) then stands
           for the EXISTS of every job: the script is atomic, so it ran exactly when the
           marker is there. Without it (dedupe keys, named schedules, calls of a few jobs:
           batching.FRESH_MIN_JOBS) each id is checked.
  ARGV[6]  windows         optional (then ARGV[5] is ""): msgpack array, flat, per job with a
           dedupe window (dedupe_ttl and/or debounce: scheduler/sdk/batching.py's windowed):
           row (the job's number in this call, from 1), key_id (the key's dedupe_job_id),
           ttl_ms, debounce_ms. The record `<prefix>dedupe:<key_id>` holds the window's job
           id; the job id was drawn in this shard (jobspec.window_job_id), so on a Cluster
           both are in one slot. While the record lives, the job is not written and its
           reply is the record's job id (a string, not a code); a debounce then, if that
           job's slot is still `scheduled` and never started (attempt 0), replaces the job's
           payload with this one (or removes it) and moves the slot to now + debounce_ms
           (its `due` score and its fire_ms field; the slot keeps its id), stretching the
           record to that time if it would end sooner. A slot already dispatched is left as
           it is. Without the record
           the job is created as any other, and the record is set to its id, expiring after
           max(ttl_ms, fire_ms - now) (a debounced run keeps its key until it fires); a
           debounced slot gets field overlap = "debounce", which promote.lua never takes
           early (a repeat can move it until its fire time).
           Without ARGV[6] a submit pays one nil test per job.

  Every job is checked before anything is written; one that fails a check refuses the whole
  call with an error reply "INVALID job <i> (<id>): <problem>; nothing was written" (a
  direct caller's mistake: the SDK checks the same first):
  - n: a whole number, and the array holds exactly the n jobs and their f pairs;
  - job id: 1-128 characters from A-Z a-z 0-9 _ . - (it becomes part of key names);
  - queue: 1-64 characters from the same set; task: 1-200 bytes, no control character (C0,
    DEL, or C1 in UTF-8: task names reach terminals and log lines);
  - fire_ms: a string of decimal digits without a leading zero, at most LATEST_MS (the
    end of the year 9999, scheduler/core/timing.py);
  - f: a whole number; each field a job-hash field of the contract (JOB_FIELD_TYPES, from
    scheduler/core/models.py's SUBMIT_FIELDS: the fields with a default, `payload`, `spec`,
    `traceparent`), its value of that field's type: a whole number >= 0 ("n"), a number
    from 0 to 1 ("f"), a string ("s"), or one of an enum's values (kind, delivery,
    catchup, overlap: models.ENUM_FIELDS); priority (only when not the default 3) an
    integer from 1 to 5;
  - payload: a string, at most the namespace's limit, field `max_payload_bytes` of
    `<prefix>config` (a copy of the namespace's, written by the client that created it;
    1 MiB, as DEFAULT_MAX_PAYLOAD_BYTES in scheduler/core/models.py, when absent). Its JSON is
    not parsed here (that would cost per byte): readers show one that does not decode as
    such (models.shown_payload).

  Reply: one code per job, in order (R, replies.py)
     R.OK      created: job hash, slot hash, and a dispatch-stream entry (fire_ms <= now;
               a job with a concurrency_key field enters its key's queue instead, and its
               slot copies the key and the job fields its take needs: _lib.lua's
               key_enqueue and grant_copy, take.lua;
               it carries the job fields a claim needs: _lib.lua's carry_entry)
               or a `due` entry (fire_ms > now); the entry goes to the lane of the job's
               priority (_lib.lua's lane(), named in the shard's `lanes` index: index_lane),
               and the slot copies a priority field. A recurring job (field kind = "cron") gets
               no slot here: it enters the shard's `cron` set scored by fire_ms, its first
               occurrence, and the materializer creates its slots. Jobs of any kind but
               "immediate" are indexed in the shard's `jobs` set (for listing).
     job id    (a string) a windowed job whose window was open: the first job's id (ARGV[6])
     R.EXISTS  the job id already existed (a dedupe key repeated, or this very call run
               again by a client retry after a lost reply: generated ids need the check too,
               made once per call when `fresh`); nothing was written

  Event: type "submitted", one record per created job: its slot id alone (the job's id is
  its prefix: events.py), or {job} for a cron job (its slots come from materialize), or
  {job, slot, late_ms} when fire_ms was already past (an `at` instant in the past runs now,
  and its lag is visible here). The job and slot hashes hold the rest. Ids alone are joined
  as JSON text, with no table and no cjson per job: a record as a table for cjson costs more
  on every job (bench script_ab).
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local now_s = string.format('%d', now)  -- a Lua number given to redis.call is printed "%.14g"
local maxlen = ARGV[2]
local n = tonumber(ARGV[3])
local items = cmsgpack.unpack(ARGV[4])
local fresh = ARGV[5] == '1'
local windows = ARGV[6] and cmsgpack.unpack(ARGV[6])  -- nil for nearly every call
-- Longer than any resend of a lost reply (redis-py retries within seconds), and no longer: the
-- marker holds memory while it lives.
local SUBMITTED_TTL_MS = 600000

--- @include "_lib.lua"

local MAX_PAYLOAD = tonumber(redis.call('HGET', prefix .. 'config', 'max_payload_bytes')) or 1048576

local function invalid(i, job_id, problem)
  return redis.error_reply('INVALID job ' .. i .. ' (' .. string.sub(tostring(job_id), 1, 40)
    .. '): ' .. problem .. '; nothing was written')
end

-- Check every job before writing any. Queue and task names repeat across a batch: each
-- distinct one is checked once (checking every job's was a large share of the script: bench
-- script_ab). So do fire
-- times and option fields (a batch's jobs mostly share theirs): the last value checked of
-- each is remembered, and the same string (Lua interns them) is not checked again.
local good_queue, good_task, good_fire = {}, {}, false
local PRIORITY_OK = {['1'] = true, ['2'] = true, ['3'] = true, ['4'] = true, ['5'] = true}
local field_types, good_field  -- JOB_FIELD_TYPES, made at the first field but the payload
if not n or n < 0 or n % 1 ~= 0 then return invalid(0, '', 'bad job count') end
local b = 0
for i = 1, n do
  local job_id, task, queue, fire, f = items[b + 1], items[b + 2], items[b + 3], items[b + 4],
    items[b + 5]
  if not name_ok(job_id, 128) then return invalid(i, job_id, 'malformed job id') end
  if not good_queue[queue] then
    if not name_ok(queue, 64) then return invalid(i, job_id, 'malformed queue name') end
    good_queue[queue] = true
  end
  if not good_task[task] then
    local problem = task_problem(task)
    if problem then return invalid(i, job_id, problem) end
    good_task[task] = true
  end
  -- Decimal digits, no leading zero: the slot id repeats them as they are. (Today's times
  -- have 13 digits: the bound is read only from 15.)
  if fire ~= good_fire then
    if type(fire) ~= 'string' or not string.find(fire, '^[1-9]%d*$') and fire ~= '0'
        or #fire >= 15 and (#fire > 15 or tonumber(fire) > LATEST_MS) then
      return invalid(i, job_id, 'fire_ms must be a whole number of ms from 0 to LATEST_MS, '
        .. 'in decimal digits')
    end
    good_fire = fire
  end
  if type(f) ~= 'number' or f < 0 or f % 1 ~= 0 then return invalid(i, job_id, 'bad field count') end
  local last = b + 5 + 2 * f
  for at = b + 6, last, 2 do
    local name, value = items[at], items[at + 1]
    if name == 'payload' then  -- the client sends it first
      if type(value) ~= 'string' then return invalid(i, job_id, 'the payload is not a string') end
      if #value > MAX_PAYLOAD then
        return invalid(i, job_id, 'payload of ' .. #value .. ' bytes is over the namespace '
          .. 'limit of ' .. MAX_PAYLOAD .. ' bytes')
      end
    elseif not good_field or good_field[name] ~= value or value == nil then
      if not field_types then field_types, good_field = JOB_FIELD_TYPES, {} end
      local kind = field_types[name]
      if kind == 'n' then
        if name == 'priority' then  -- a priority becomes part of a stream's key name
          if not PRIORITY_OK[tostring(value)] then
            return invalid(i, job_id, 'priority must be an integer from 1 to 5')
          end
        -- a whole number >= 0 as every reader parses it: decimal digits, or a whole Lua
        -- number below 1e15 (which Redis prints as digits)
        elseif not (type(value) == 'number' and value >= 0 and value < 1e15 and value % 1 == 0
            or type(value) == 'string' and #value >= 1 and #value <= 15
              and not string.find(value, '%D')) then
          return invalid(i, job_id, name .. ' must be a whole number >= 0')
        end
      elseif kind == 's' then
        if type(value) ~= 'string' then return invalid(i, job_id, name .. ' must be a string') end
      elseif kind == 'f' then
        local number = tonumber(value)
        if not (number and number >= 0 and number <= 1) then
          return invalid(i, job_id, name .. ' must be a number from 0 to 1')
        end
      elseif not kind then
        return invalid(i, job_id, 'unknown job field ' .. string.sub(tostring(name), 1, 40))
      elseif not kind[value] then  -- an enum's values
        return invalid(i, job_id, name .. ' ' .. string.sub(tostring(value), 1, 40)
          .. ' is not one of its values (scheduler/core/states.py)')
      end
      good_field[name] = value
    end
  end
  b = last
end
if items[b + 1] ~= nil then
  return invalid(n, '', 'the jobs array holds more items than its ' .. n
    .. ' jobs and their field counts')
end

-- The windows, checked, by row: {key_id, ttl_ms, debounce_ms}.
if windows then
  local by_row = {}
  for w = 1, #windows, 4 do
    local row, key_id, ttl, debounce = windows[w], windows[w + 1], windows[w + 2], windows[w + 3]
    if type(row) ~= 'number' or row < 1 or row > n or row % 1 ~= 0 then
      return invalid(0, '', 'a window names no job of this call')
    end
    if not name_ok(key_id, 128) then return invalid(row, '', 'malformed window key id') end
    if type(ttl) ~= 'number' or type(debounce) ~= 'number' or ttl < 0 or debounce < 0
        or ttl % 1 ~= 0 or debounce % 1 ~= 0 or ttl + debounce < 1 or ttl >= 1e15
        or debounce >= 1e15 then
      return invalid(row, key_id, 'a window needs whole ms >= 0 of ttl and debounce, not both 0')
    end
    by_row[row] = {key_id, ttl, debounce}
  end
  windows = by_row
end

-- A repeat of a windowed key while its record lives: the job it names, after the debounce.
local function window_held(i, at, last)
  local window = windows[i]
  if not window then return nil end
  local record = prefix .. 'dedupe:' .. window[1]
  local held = redis.call('GET', record)
  if not held or window[3] == 0 then return held end
  local job_key = prefix .. 'job:' .. held
  local first_fire = redis.call('HGET', job_key, 'fire_ms')
  if not first_fire then return held end  -- the job is gone: nothing to move
  local slot_id = held .. ':' .. first_fire
  local slot_key = prefix .. 'slot:' .. slot_id
  local st = redis.call('HMGET', slot_key, 'status', 'attempt')
  -- only a run that never started: a retry waiting in `due` is `scheduled` too
  if st[1] ~= 'scheduled' or st[2] and st[2] ~= '0' then return held end
  if items[at] == 'payload' and at <= last then  -- the client sends it first
    redis.call('HSET', job_key, 'payload', items[at + 1])
  else
    redis.call('HDEL', job_key, 'payload')
  end
  local fire = string.format('%d', now + window[3])
  redis.call('ZADD', prefix .. 'due', 'XX', fire, slot_id)
  redis.call('HSET', slot_key, 'fire_ms', fire)
  if redis.call('PTTL', record) < window[3] then
    redis.call('PEXPIRE', record, window[3])
  end
  return held
end

local reply = {}
if fresh and n > 0 and not redis.call('SET', prefix .. 'submitted:' .. items[1], '1', 'NX',
    'PX', SUBMITTED_TTL_MS) then
  for i = 1, n do reply[i] = R.EXISTS end  -- this call ran before: every job is there
  return reply
end
-- Per job: HSET job, XADD (or ZADD), HSET slot, and EXISTS unless `fresh` (an EXISTS from
-- Lua, command and glue, is a visible share of this script per job: bench script_ab), and
-- nothing else.
local records, plain = {}, true  -- plain: every record is a slot id
local streams = {}  -- dispatch stream key per lane, built once per call
local keyed = {}  -- key queues and queues already holding slots in this call (key_enqueue)
b = 0
for i = 1, n do
  local job_id, task, queue, fire_ms = items[b + 1], items[b + 2], items[b + 3], items[b + 4]
  local f = items[b + 5]
  local first, last = b + 6, b + 5 + 2 * f
  b = last
  local job_key = prefix .. 'job:' .. job_id
  local held = windows and window_held(i, first, last)
  if held then
    reply[i] = held
  elseif not fresh and redis.call('EXISTS', job_key) == 1 then
    reply[i] = R.EXISTS
  else
    local fire = tonumber(fire_ms)
    redis.call('HSET', job_key, 'task', task, 'queue', queue, 'fire_ms', fire_ms,
      'created_ms', now_s, unpack(items, first, last))
    local kind, priority, payload, timeout, delivery = 'immediate', nil, nil, nil, nil
    local key = nil
    for k = first, last, 2 do
      local name = items[k]
      if name == 'payload' then payload = items[k + 1]
      elseif name == 'kind' then kind = items[k + 1]
      elseif name == 'priority' then priority = tostring(items[k + 1])
      elseif name == 'timeout_ms' then timeout = items[k + 1]
      elseif name == 'delivery' then delivery = items[k + 1]
      elseif name == 'concurrency_key' then key = items[k + 1]
      end
    end
    if kind ~= 'immediate' then redis.call('ZADD', prefix .. 'jobs', now_s, job_id) end
    local slot_id = job_id .. ':' .. fire_ms
    local status, msg = 'queued', ''
    if kind == 'cron' then
      redis.call('ZADD', prefix .. 'cron', fire_ms, job_id)
    elseif fire <= now and key then
      key_enqueue(prefix, queue, key, priority, slot_id, now, keyed)
    elseif fire <= now then
      local lane_name = lane(queue, priority)
      local stream = streams[lane_name]
      if not stream then
        stream = prefix .. 'q:' .. lane_name
        streams[lane_name] = stream
        index_lane(prefix, lane_name, now_s)
      end
      msg = carry_entry(stream, slot_id, task, payload, timeout, delivery, nil)
    else
      status = 'scheduled'
      redis.call('ZADD', prefix .. 'due', fire_ms, slot_id)
    end
    if kind == 'cron' then
      slot_id = nil
    elseif key then
      -- queued now: it carries the job's fields to its take; due later, promote.lua copies
      -- them as it queues it (a debounce may change the payload until then)
      local copy = status == 'queued' and grant_copy(payload, timeout, delivery)
      if copy then
        redis.call('HSET', prefix .. 'slot:' .. slot_id, 'job_id', job_id, 'fire_ms', fire_ms,
          'status', status, 'queue', queue, 'task', task, 'msg', msg, 'concurrency_key', key,
          'grant', copy)
      else
        redis.call('HSET', prefix .. 'slot:' .. slot_id, 'job_id', job_id, 'fire_ms', fire_ms,
          'status', status, 'queue', queue, 'task', task, 'msg', msg, 'concurrency_key', key)
      end
      if priority then redis.call('HSET', prefix .. 'slot:' .. slot_id, 'priority', priority) end
    elseif priority then
      redis.call('HSET', prefix .. 'slot:' .. slot_id, 'job_id', job_id, 'fire_ms', fire_ms,
        'status', status, 'queue', queue, 'task', task, 'msg', msg, 'priority', priority)
    else
      redis.call('HSET', prefix .. 'slot:' .. slot_id, 'job_id', job_id, 'fire_ms', fire_ms,
        'status', status, 'queue', queue, 'task', task, 'msg', msg)
    end
    reply[i] = R.OK
    if windows and windows[i] then
      local window = windows[i]
      redis.call('SET', prefix .. 'dedupe:' .. window[1], job_id, 'PX',
        math.max(window[2], fire - now, 1))
      -- promote.lua takes it at its fire time, never early: until then a repeat may move it
      if window[3] > 0 then
        redis.call('HSET', prefix .. 'slot:' .. slot_id, 'overlap', 'debounce')
      end
    end
    -- Only what the snapshotter needs (it reads the hashes): bytes in the events stream
    -- until the snapshotter acks.
    if not slot_id or fire < now then
      plain = false
      records[#records + 1] = {job = job_id, slot = slot_id,
        late_ms = slot_id and fire < now and now - fire or nil}
    else
      records[#records + 1] = slot_id
    end
  end
end

if #records > 0 then
  redis.call('XADD', prefix .. 'events', 'MAXLEN', '~', maxlen, '*', 'type', 'submitted',
    'ts', now_s, 'worker', '', 'data',
    plain and id_records(records) or cjson.encode(records))
end
return reply
