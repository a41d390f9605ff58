--[[ _lib: helpers shared by the transitions; scripts/source.py inlines this file where a script
  says `--- @include "_lib.lua"`. Defines no keys or arguments of its own.

  The fencing token of a slot is its attempt number: every claim increments it, so a worker
  holding an older attempt can no longer commit.
]]

-- Append one lifecycle event (a batch of records) to the shard's capped events stream.
local function emit(prefix, maxlen, now, kind, records, worker)
  if #records == 0 then return end
  redis.call('XADD', prefix .. 'events', 'MAXLEN', '~', maxlen, '*',
    'type', kind, 'ts', now, 'worker', worker or '', 'data', cjson.encode(records))
end

-- A slot ended (dead, cancelled, lost, skipped) at `at`: the shard's `finished` zset is how
-- the scheduler node's expirer (expire.lua) finds finished work to bound; a slot missing from
-- it would stay in Redis for good when the namespace keeps no history. Successes are indexed
-- in the shard's `done` list instead (complete.lua: the hot path's cheaper append).
local function index_finished(prefix, slot_id, at)
  redis.call('ZADD', prefix .. 'finished', at, slot_id)
end

-- Slot ids as an event's records, each the id alone (events.py: the hot path's form), as JSON
-- text: one concat per call, no table or cjson per record. Ids hold no character JSON escapes
-- (keys.py).
local function id_records(ids)
  return '["' .. table.concat(ids, '","') .. '"]'
end

-- The dispatch stream (after `q:`) of a queue's priority; keys.lane() is the same rule. A
-- slot or job hash holds `priority` only when it is not the default, whose lane is the plain
-- queue name.
local function lane(queue, priority)
  if priority and tonumber(priority) ~= DEFAULT.priority then return queue .. ':p' .. priority end
  return queue
end

-- Ack a dispatch-stream entry of a lane. Acked entries are trimmed in bulk by claim
-- (trim_acked), which is far cheaper than an XDEL per entry.
local function ack(prefix, lane_name, msg)
  if msg and msg ~= '' then
    redis.call('XACK', prefix .. 'q:' .. lane_name, 'workers', msg)
  end
end

-- Drop the acked head of a dispatch stream: every entry older than both the oldest pending
-- entry and the group's last-delivered id has been delivered and acked.
local function trim_acked(stream)
  local groups = redis.call('XINFO', 'GROUPS', stream)
  local last
  for _, g in ipairs(groups) do
    local name, delivered
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then delivered = g[i + 1] end
    end
    if name == 'workers' then last = delivered end
  end
  if not last or last == '0-0' then return end
  local pending = redis.call('XPENDING', stream, 'workers')
  local floor = last
  if pending[1] > 0 then
    local a, b = string.match(pending[2], '(%d+)-(%d+)')
    local c, d = string.match(last, '(%d+)-(%d+)')
    if tonumber(a) < tonumber(c) or (a == c and tonumber(b) < tonumber(d)) then floor = pending[2] end
  end
  redis.call('XTRIM', stream, 'MINID', '~', floor)
end

-- The fenced view of a running slot: nil unless it is running under `token` (its attempt).
local function leased(slot_key, token)
  local st = redis.call('HMGET', slot_key, 'status', 'attempt', 'msg', 'queue', 'worker',
    'claimed_ms', 'lease_until', 'job_id', 'priority', 'concurrency_key')
  if st[1] ~= 'running' or st[2] ~= token then return nil, st end
  return {msg = st[3], lane = lane(st[4], st[9]), attempt = tonumber(st[2]), worker = st[5],
    claimed_ms = tonumber(st[6]), lease_until = tonumber(st[7]), job_id = st[8],
    queue = st[4], key = st[10]}, st
end

-- The queue's running keyed attempts, every key's (their permits): one zset, every score 0,
-- so its members are in byte order and a key's are one range of it (key_held). One set a
-- queue, not one a key: a take adds its runs in one ZADD, a commit gives them back in one
-- ZREM, whatever their keys, and no key's set is made and dropped with its every run.
local function queue_running(prefix, queue)
  return prefix .. 'kruns:' .. queue
end

-- A running attempt's member of its queue's running set, "<key> <slot id>#<attempt>": it is
-- there exactly while that attempt is the slot's running one, so removing it fences a commit
-- as an entry's XACK does (complete.lua). A key holds no space (keys.py), and every
-- character it may hold sorts after '!', so "<key> " up to "<key>!" is the key's range.
local function run_member(key, slot_id, attempt)
  return key .. ' ' .. slot_id .. '#' .. attempt
end

-- The older form of a key's permits: a set per key (`krun:<queue>:<key>`) whose members are
-- "<slot id>#<attempt>", or the slot id alone before they named the attempt. Runs an older
-- version's take started hold one there: counted against the key's limit and removed by every
-- end of their attempt, until none is left.
local function older_running(prefix, queue, key)
  return prefix .. 'krun:' .. queue .. ':' .. key
end

-- A run's permit of the older form that names its attempt (the other is the slot id alone).
local function older_member(slot_id, attempt)
  return slot_id .. '#' .. attempt
end

-- How many permits of its key's limit `key` holds: its members of the queue's running set,
-- and those of the older form.
local function key_held(prefix, queue, key)
  return redis.call('ZLEXCOUNT', queue_running(prefix, queue), '[' .. key .. ' ', '(' .. key .. '!')
    + redis.call('ZCARD', older_running(prefix, queue, key))
end

-- The attempt is over: its stream entry is acked, or it leaves the shard's lease set (an
-- at_most_once slot, acked at claim, and a keyed one, which has no entry); a keyed run gives
-- its key's permit back, in either form. Every end of a running attempt passes here
-- (complete.lua's too, off its fenced paths, where the entry's ack or the removal of the
-- run's member proved the attempt and ended it).
local function end_lease(prefix, slot_id, s)
  if s.msg and s.msg ~= '' then
    ack(prefix, s.lane, s.msg)
  else
    redis.call('ZREM', prefix .. 'leases', slot_id)
  end
  if s.key then
    local attempt = string.format('%d', s.attempt)
    redis.call('ZREM', queue_running(prefix, s.queue), run_member(s.key, slot_id, attempt))
    redis.call('ZREM', older_running(prefix, s.queue, s.key), slot_id, older_member(slot_id, attempt))
  end
end

-- end_lease for a batch of attempts (complete.lua's): an entry is acked at once, the lease
-- set and the running sets are collected in `ends` ({leases = {}, runs = {}}) and left by
-- end_leases in one ZREM each, not one per slot. The slot's fields as end_lease's `s` has
-- them, but its priority for its lane (no table and no lane() for a slot without entry), and
-- its attempt as text.
local function end_lease_later(prefix, slot_id, msg, queue, priority, key, attempt, ends)
  if msg and msg ~= '' then
    ack(prefix, lane(queue, priority), msg)
  else
    ends.leases[#ends.leases + 1] = slot_id
  end
  if key then
    local running, older = queue_running(prefix, queue), older_running(prefix, queue, key)
    local members = ends.runs[running]
    if not members then members = {}; ends.runs[running] = members end
    members[#members + 1] = run_member(key, slot_id, attempt)
    members = ends.runs[older]
    if not members then members = {}; ends.runs[older] = members end
    members[#members + 1], members[#members + 2] = slot_id, older_member(slot_id, attempt)
  end
end

local function end_leases(prefix, ends)
  for i = 1, #ends.leases, 1000 do  -- bounded: unpack puts every id on the Lua stack
    redis.call('ZREM', prefix .. 'leases', unpack(ends.leases, i, math.min(i + 999, #ends.leases)))
  end
  for running, members in pairs(ends.runs) do
    for i = 1, #members, 1000 do
      redis.call('ZREM', running, unpack(members, i, math.min(i + 999, #members)))
    end
  end
end

-- How the current attempt ended, for field `a:<n>` of the slot hash. Attempts that end the
-- slot's life on the hot path (complete) are not archived this way: the slot's own fields
-- (worker, claimed_ms, lease_until, started_ms, finished_ms, outcome) describe its last one.
-- The times are written as whole-number text: cjson writes a number as "%.14g", which turns
-- a time from 1e14 ms on into "1e+14" text that no reader takes for an integer.
local function attempt_record(s, outcome, started, finished, err)
  local rec = {number = s.attempt, worker = s.worker, outcome = outcome}
  if err and err ~= '' then rec.error = err end
  local json = cjson.encode(rec)
  local times = {}
  for _, t in ipairs({{'claimed_ms', s.claimed_ms}, {'lease_until_ms', s.lease_until},
      {'started_ms', tonumber(started)}, {'finished_ms', tonumber(finished)}}) do
    if t[2] then times[#times + 1] = '"' .. t[1] .. '":' .. string.format('%d', t[2]) end
  end
  if #times == 0 then return json end
  return string.sub(json, 1, -2) .. ',' .. table.concat(times, ',') .. '}'
end

-- A slot's dispatch-stream entry carrying the job fields its claim needs, so that the claim
-- reads no job hash (claim.lua's ARGV[8]): s slot id, then t task, p payload, o timeout_ms, d
-- delivery in this order ('' where the job hash has no such field; reader.py reads them by
-- position), and f when dispatched early (nb: not before). A payload over 4 KiB is not copied
-- (the entry would hold it until trimmed): that entry has s (and f) alone, as the entries
-- other transitions make (dispatch, below), and its claim reads the job.
local function carry_entry(stream, slot_id, task, payload, timeout, delivery, nb)
  if not task or (payload and #payload > 4096) then
    if nb then return redis.call('XADD', stream, '*', 's', slot_id, 'f', nb) end
    return redis.call('XADD', stream, '*', 's', slot_id)
  end
  if nb then
    return redis.call('XADD', stream, '*', 's', slot_id, 't', task, 'p', payload or '',
      'o', timeout or '', 'd', delivery or '', 'f', nb)
  end
  return redis.call('XADD', stream, '*', 's', slot_id, 't', task, 'p', payload or '',
    'o', timeout or '', 'd', delivery or '')
end

-- A keyed slot's copy of the job fields its take grants (take.lua), so that the take reads
-- no job hash: slot field `grant`, "<timeout_ms>:<delivery>:<payload>" ('' for each the job
-- has not), written by the HSET that queues the slot, emptied by the take's. One field, not
-- one per job field: every field more of a slot hash costs each later read and write of it.
-- The task is the slot's own field: a caller whose slot's task may differ from the job's
-- copies nothing. Nor is a copy longer than 64 bytes made (the take then reads the job):
-- a longer value turns the slot hash from a listpack into a hash table for good (Redis's
-- default hash-max-listpack-value), which would triple a finished slot's memory.
local function grant_copy(payload, timeout, delivery)
  if payload and #payload > 64 then return nil end
  if type(timeout) == 'number' then timeout = string.format('%d', timeout) end
  local copy = (timeout or '') .. ':' .. (delivery or '') .. ':' .. (payload or '')
  if #copy > 64 then return nil end
  return copy
end

-- Name a lane in the shard's index of lanes that may hold entries (`lanes`, scored by the
-- last write). Every script that adds an entry to a lane calls this in the same call (the
-- hot paths once per lane per call), so a lane holding anything is always indexed, whatever
-- lua/clean_lanes.lua removed before: status and the reclaimer read only indexed lanes.
local function index_lane(prefix, lane_name, now)
  redis.call('ZADD', prefix .. 'lanes', now, lane_name)
end

-- Queue a slot with a concurrency key in its key's queue (`kq:<queue>:<key>`, scored by
-- priority then dispatch time: keys.key_score), instead of a dispatch stream: take.lua claims
-- it in the key's turn. A key is in the queue's ring exactly while its queue holds slots
-- (take.lua removes it as it empties the queue), so it enters the ring when its first slot
-- arrives, and then writes the queue's wake stream (`kwake:<queue>`). The slot's status and
-- msg ('' : no entry) are the caller's to set. `seen`, a table a caller of many keyed slots
-- keeps for one call (or nil), spares the checks of a key queue and a queue already seen
-- holding slots in this call.
local function key_enqueue(prefix, queue, key, priority, slot_id, now, seen)
  local kq = prefix .. 'kq:' .. queue .. ':' .. key
  local score = string.format('%d', (tonumber(priority) or DEFAULT.priority) * 1e13 + tonumber(now))
  if seen and seen[kq] then
    redis.call('ZADD', kq, score, slot_id)
    return
  end
  if redis.call('ZADD', kq, score, slot_id) == 1 and redis.call('ZCARD', kq) == 1 then
    redis.call('RPUSH', prefix .. 'kring:' .. queue, key)
    -- Wakes the workers blocked on the queue's wake stream (keywake.py): a key has no stream
    -- entry of its own, and a free key's job should start as soon as a plain one.
    redis.call('XADD', prefix .. 'kwake:' .. queue, 'MAXLEN', '1', '*', 'k', key)
  end
  if not (seen and seen[queue]) then redis.call('ZADD', prefix .. 'kqueues', now, queue) end
  if seen then seen[kq], seen[queue] = true, true end
end

-- Put a slot (back) into its lane's dispatch stream under a new entry, or, for a slot with a
-- concurrency key, into its key's queue (then the reply is '': no entry). Neither carries the
-- job's fields (carry_entry, grant_copy; a slot's copy was emptied by the take that started
-- it): the claim or take reads the job as it is then.
local function dispatch(prefix, slot_key, slot_id, lane_name, now)
  local keyed = redis.call('HMGET', slot_key, 'concurrency_key', 'queue', 'priority')
  if keyed[1] then
    key_enqueue(prefix, keyed[2], keyed[1], keyed[3], slot_id, now)
    redis.call('HSET', slot_key, 'status', 'queued', 'msg', '', 'available_ms', now)
    return ''
  end
  index_lane(prefix, lane_name, now)
  local msg = redis.call('XADD', prefix .. 'q:' .. lane_name, '*', 's', slot_id)
  redis.call('HSET', slot_key, 'status', 'queued', 'msg', msg, 'available_ms', now)
  return msg
end

-- Attempts ran out: the slot ends `dead` and enters the shard's dead-letter set.
local function bury(prefix, slot_key, slot_id, now, token, record)
  redis.call('ZADD', prefix .. 'dlq', now, slot_id)
  redis.call('HSET', slot_key, 'status', 'dead', 'finished_ms', now, 'a:' .. token, record)
  index_finished(prefix, slot_id, now)
end

-- The refusal of a commit whose token is not the slot's current one.
local function refusal(slot_id, token, st, outcome)
  return {slot = slot_id, token = tonumber(token), status = st[1] or 'missing',
    current_token = tonumber(st[2]), outcome = outcome}
end

-- End the expired attempt of a running slot `s` (see leased), for reclaim and sweep. The
-- attempt is recorded "lost" and counts as a failure (a job that crashes its worker must not
-- loop forever): a slot whose cancellation was requested ends `cancelled`; at_most_once slots
-- end `lost`; others are dispatched again at once, or end `dead` (in `dlq`) when failures
-- reach max_attempts (default 3, as in scheduler/core/models.py). Returns what happened
-- ("cancelled" | "lost" | "dead" | "reclaimed") and the event record.
local function expire_lease(prefix, slot_id, slot_key, s, now)
  local token = tostring(s.attempt)
  end_lease(prefix, slot_id, s)
  local err = 'lease expired: worker ' .. (s.worker or '?') .. ' stopped heartbeating'
  local record = attempt_record(s, 'lost', nil, now, err)
  local job = redis.call('HMGET', prefix .. 'job:' .. s.job_id, 'delivery', 'max_attempts')
  if redis.call('HEXISTS', slot_key, 'cancel') == 1 then
    redis.call('HSET', slot_key, 'status', 'cancelled', 'finished_ms', now, 'a:' .. token, record)
    index_finished(prefix, slot_id, now)
    return 'cancelled', {slot = slot_id, attempt = s.attempt, error = 'cancel requested'}
  elseif job[1] == 'at_most_once' then
    redis.call('HSET', slot_key, 'status', 'lost', 'finished_ms', now, 'a:' .. token, record)
    index_finished(prefix, slot_id, now)
    return 'lost', {slot = slot_id, attempt = s.attempt, worker = s.worker}
  end
  local failures = redis.call('HINCRBY', slot_key, 'failures', 1)
  if failures >= (tonumber(job[2]) or DEFAULT.max_attempts) then
    bury(prefix, slot_key, slot_id, now, token, record)
    return 'dead', {slot = slot_id, attempt = s.attempt, outcome = 'lost', error = err}
  end
  redis.call('HSET', slot_key, 'a:' .. token, record)
  dispatch(prefix, slot_key, slot_id, s.lane, now)
  return 'reclaimed', {slot = slot_id, attempt = s.attempt, worker = s.worker}
end

-- A job id (longest 128) or a queue name (64) as keys.py allows it: it becomes part of key
-- names, so no braces, colons, spaces or control characters.
local function name_ok(value, longest)
  return type(value) == 'string' and #value >= 1 and #value <= longest
    and not string.find(value, '[^%w_%.%-]')
end

-- Why a task name given by a caller is refused, nil when it is not: 1-200 bytes of UTF-8
-- (a worker decodes the task names it claims: no overlong form, surrogate or code point past
-- U+10FFFF, as Python decodes), no control character (C0, DEL, or C1 as UTF-8), which would
-- reach terminals and log lines as it is. One function, one closure per call: a single
-- submit pays for each.
local function task_problem(task)
  if type(task) ~= 'string' or #task < 1 or #task > 200 then return 'malformed task name' end
  if not string.find(task, '[%c\127-\255]') then return nil end  -- printable ASCII
  local at = string.find(task, '[%c\127]') or string.find(task, '\194[\128-\159]')
  if at then
    return string.format('task name holds a control character (byte 0x%02x at %d); use '
      .. 'printable characters', string.byte(task, at), at)
  end
  local i, n = 1, #task
  while i <= n do
    local c = string.byte(task, i)
    if c >= 128 then
      local len, low, high = 0, 128, 191  -- the bounds of the byte after the first
      if c >= 194 and c <= 223 then len = 1
      elseif c >= 224 and c <= 239 then
        len = 2
        if c == 224 then low = 160 elseif c == 237 then high = 159 end
      elseif c >= 240 and c <= 244 then
        len = 3
        if c == 240 then low = 144 elseif c == 244 then high = 143 end
      else return 'task name is not UTF-8 text' end
      for k = 1, len do
        local b = string.byte(task, i + k)
        if not b or b < (k == 1 and low or 128) or b > (k == 1 and high or 191) then
          return 'task name is not UTF-8 text'
        end
      end
      i = i + len
    end
    i = i + 1
  end
end

-- Remove one finished slot from Redis: its hash, its `finished` and `runs:` entries, and its
-- job's hash (leaving the `jobs` index) once no slot of the job is left and the job does not
-- recur. A recurring job's definition stays: it is small and `sched jobs show` reads it. A
-- one-off job with a triggered run beside its own (trigger.lua) stays while either does.
-- retire.lua and expire.lua remove finished work through here alone; the caller has checked
-- the slot is terminal. Returns 1 when the job's hash went too, else 0.
local function retire_slot(prefix, slot_id, job_id)
  local job_key = prefix .. 'job:' .. job_id
  local runs = prefix .. 'runs:' .. job_id
  local job = redis.call('HMGET', job_key, 'kind', 'fire_ms')  -- kind is absent: immediate
  redis.call('ZREM', prefix .. 'finished', slot_id)
  redis.call('DEL', prefix .. 'slot:' .. slot_id)
  redis.call('ZREM', runs, slot_id)
  if job[1] == 'cron' or not job[2] then return 0 end
  local own = job_id .. ':' .. job[2]
  if (own ~= slot_id and redis.call('EXISTS', prefix .. 'slot:' .. own) == 1)
      or redis.call('EXISTS', runs) == 1 then
    return 0  -- another slot of the job is still in Redis
  end
  redis.call('DEL', job_key)
  if job[1] then redis.call('ZREM', prefix .. 'jobs', job_id) end  -- immediate: not indexed
  return 1
end

-- Finished work up to `finished_ms` left this shard: `stats` keeps the latest such time, so
-- Client.result() can tell a job that expired from one that never was.
local function note_retired(prefix, finished_ms)
  if finished_ms <= 0 then return end
  local stats = prefix .. 'stats'
  if finished_ms > (tonumber(redis.call('HGET', stats, 'retired_ms')) or 0) then
    redis.call('HSET', stats, 'retired_ms', finished_ms)
  end
end

-- The occurrences of `fires` (fire_ms values) still at or past the job's watermark (its score
-- in `cron`) and without a slot: those no node made, which the caller is about to drop.
local function unmade_fires(prefix, job_id, fires)
  local watermark = tonumber(redis.call('ZSCORE', prefix .. 'cron', job_id))
  local out = {}
  if not watermark then return out end
  for _, fire in ipairs(fires) do
    if tonumber(fire) >= watermark
        and redis.call('EXISTS', prefix .. 'slot:' .. job_id .. ':' .. fire) == 0 then
      out[#out + 1] = fire
    end
  end
  return out
end

-- Write occurrences that will not run to the job's fire ledger (`fires:<job_id>`, zset by
-- fire_ms; scheduler/core/ledger.py): each of `fires` (fire_ms values, or slot ids
-- `<job_id>:<fire_ms>`) as "<fire_ms>:<reason>[:<detail>]", then trim the ledger to its
-- newest FIRES_CAP entries. The new entries count in the shard's stats `not_run:<reason>`
-- (stats.lua: the exporter's sched_occurrences_not_run).
local function note_fires(prefix, job_id, fires, reason, detail)
  if #fires == 0 then return end
  local key = prefix .. 'fires:' .. job_id
  local tail = detail and (':' .. reason .. ':' .. detail) or (':' .. reason)
  local args = {}
  for _, f in ipairs(fires) do
    local fire = string.match(f, '(%d+)$')
    args[#args + 1] = fire
    args[#args + 1] = fire .. tail
  end
  local added = 0
  for i = 1, #args, 7998 do
    added = added + redis.call('ZADD', key, unpack(args, i, math.min(i + 7997, #args)))
  end
  redis.call('HINCRBY', prefix .. 'stats', 'not_run:' .. reason, added)
  local extra = redis.call('ZCARD', key) - FIRES_CAP
  if extra > 0 then redis.call('ZREMRANGEBYRANK', key, 0, extra - 1) end
end

-- The records of a `not_run` event (events.py): the occurrences a script wrote to the fire
-- ledger (note_fires), given as the same lists (fire_ms values, or slot ids), as one record
-- {job, reason, fires = fire_ms values as text}, which the snapshotter copies to the history
-- store; none when there are none (an empty list would encode as a JSON object).
local function not_run_records(job_id, reason, ...)
  local fires = {}
  for _, list in ipairs({...}) do
    for _, f in ipairs(list) do fires[#fires + 1] = string.match(f, '(%d+)$') end
  end
  if #fires == 0 then return {} end
  return {{job = job_id, reason = reason, fires = fires}}
end
