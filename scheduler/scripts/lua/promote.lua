--[[ promote: move due slots to their dispatch streams (scheduled -> queued).

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  limit           at most this many slots per call
  ARGV[4]  due_before_ms   optional: take only slots due at or before this (default now_ms);
                           a node that does not own the shard passes now - 1 s, to promote
                           only what the owner has left overdue
  ARGV[5]  ahead_ms        optional (default 0): also take slots due within this long after
                           due_before, early (see below)

  Slots in `due` whose score is <= due_before + ahead are taken in score order. A slot that is
  no longer `scheduled` (cancelled, or gone) is only removed from `due`. A slot goes to the
  lane of its priority (slot field `priority`, absent for the default: _lib.lua's lane()),
  named in the shard's `lanes` index (_lib.lua's index_lane); a slot with a concurrency key
  goes to its key's queue instead (_lib.lua's key_enqueue; take.lua claims it), never early.

  Early: a slot whose score (its fire time, or a retry's backoff time) is still ahead of now
  is dispatched now, so the work of the fire instant is done before it (a minute-boundary
  burst then costs Redis only its claims and commits at the instant). Its stream entry carries
  field `f` = the score and the slot field `nb` (not before) the same: the worker holds the
  entry until its Redis clock reaches `f` (reader.py), and claim.lua refuses (R.EARLY) to
  start a slot before its `nb`, so no path that loses `f` (a requeue, a sweep) can start it
  early. An overlap="skip" slot is never taken early (its overlap check must see the job as
  it is at the fire time): it stays in `due` until then; nor is a debounced one (slot field
  overlap = "debounce", from submit.lua: a repeated submit may still move it).

  Every entry carries the job fields its claim needs (_lib.lua's carry_entry: the job hash is
  read here, before the fire time, instead of by the claim at it), and every keyed slot
  those its take needs (_lib.lua's grant_copy, take.lua), unless its task is no longer its
  job's.

  Overlap: a slot with field overlap = "skip" (an occurrence of a cron job with
  overlap="skip") is dispatched only if the job's last dispatched slot (job field `active`)
  is no longer scheduled, queued or running; otherwise it ends `skipped`, with field
  `yielded_to` naming that slot, and an entry "<fire_ms>:overlap:<that slot>" in the job's
  fire ledger `fires:<job_id>` (_lib.lua's note_fires; only this branch writes it). Checking
  at dispatch time, not when the slot was created, is what makes "still running" mean now.

  Reply: {promoted, next_ms, skipped}: how many slots were dispatched; when the caller
  should call again (ms, Redis time; -1 when `due` is empty): the earliest score left minus
  ahead_ms, or the own score of a slot never taken early (below); and how many occurrences
  ended `skipped`.

  Events: "queued", each record its slot id alone (events.py; the slot hash holds the rest),
  or {slot, job} for an overlap="skip" slot, which changed its job's `active` (the snapshotter
  copies the job too: `sched recover` restores it knowing its run in flight); "skipped"
  {slot, active} (the slot still active).
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local limit = tonumber(ARGV[3])
local due_before = tonumber(ARGV[4] or ARGV[1])
local ahead = tonumber(ARGV[5] or 0)

--- @include "_lib.lua"

local due = prefix .. 'due'
local until_ms = due_before + ahead
local ids = redis.call('ZRANGE', due, '-inf', until_ms, 'BYSCORE', 'LIMIT', 0, limit,
  'WITHSCORES')
local records, skipped, activated = {}, {}, {}
local left = nil  -- the earliest score of a slot left for its fire time (overlap skip, debounce)
local taken = {}  -- ids leaving `due`, only kept once one stays behind (see the end)
local indexed = {}  -- lanes named in `lanes` by this call
local keyed = {}  -- key queues and queues already holding slots in this call (key_enqueue)

-- The other slot an overlap="skip" job still has in flight, or nil. (A retry of the active
-- slot itself comes back through `due` and must not skip itself.)
local function busy(job_key, slot_id)
  local active = redis.call('HGET', job_key, 'active')
  if not active or active == slot_id then return nil end
  local status = redis.call('HGET', prefix .. 'slot:' .. active, 'status')
  if status == 'scheduled' or status == 'queued' or status == 'running' then return active end
  return nil
end

for i = 1, #ids, 2 do
  local slot_id, score = ids[i], ids[i + 1]
  local slot_key = prefix .. 'slot:' .. slot_id
  local st = redis.call('HMGET', slot_key, 'status', 'queue', 'overlap', 'priority', 'job_id',
    'concurrency_key', 'task')
  local early = tonumber(score) > now
  -- A keyed slot is never taken early either: its key's queue has no not-before guard.
  if early and st[1] == 'scheduled' and (st[3] == 'skip' or st[3] == 'debounce' or st[6]) then
    if not left then left = tonumber(score) end
  else
    taken[#taken + 1] = slot_id
    if st[1] == 'scheduled' then
      local job_key, active = prefix .. 'job:' .. (st[5] or ''), nil
      if st[3] == 'skip' then active = busy(job_key, slot_id) end
      if active then
        redis.call('HSET', slot_key, 'status', 'skipped', 'finished_ms', now, 'yielded_to', active)
        index_finished(prefix, slot_id, now)
        note_fires(prefix, st[5], {slot_id}, 'overlap', active)
        skipped[#skipped + 1] = {slot = slot_id, active = active}
      else
        if st[6] then
          key_enqueue(prefix, st[2], st[6], st[4], slot_id, now, keyed)
          -- The job's fields go to the slot (grant_copy) for its take, as to an entry below;
          -- not when the job's task is no longer the slot's (the take grants the slot's).
          local job = redis.call('HMGET', job_key, 'task', 'payload', 'timeout_ms', 'delivery')
          local copy = job[1] == st[7] and grant_copy(job[2] or nil, job[3] or nil, job[4] or nil)
          if copy then
            redis.call('HSET', slot_key, 'status', 'queued', 'msg', '', 'grant', copy)
          else
            redis.call('HSET', slot_key, 'status', 'queued', 'msg', '')
          end
        else
          -- The job's fields travel in the entry (carry_entry): read here, ahead of the
          -- fire time for an early slot, instead of by the claim at it.
          local job = redis.call('HMGET', job_key, 'task', 'payload', 'timeout_ms', 'delivery')
          local lane_name = lane(st[2], st[4])
          if not indexed[lane_name] then
            indexed[lane_name] = true
            index_lane(prefix, lane_name, now)
          end
          local stream = prefix .. 'q:' .. lane_name
          if early then
            local msg = carry_entry(stream, slot_id, job[1], job[2], job[3], job[4], score)
            redis.call('HSET', slot_key, 'status', 'queued', 'msg', msg, 'nb', score)
          else
            local msg = carry_entry(stream, slot_id, job[1], job[2], job[3], job[4], nil)
            redis.call('HSET', slot_key, 'status', 'queued', 'msg', msg)
          end
        end
        if st[3] == 'skip' then  -- never early (above)
          redis.call('HSET', job_key, 'active', slot_id)
          activated[#activated + 1] = {slot = slot_id, job = st[5]}
        else
          records[#records + 1] = slot_id
        end
      end
    end
  end
end
-- The slots taken are the lowest-ranked entries of `due` (nothing above adds to it): they
-- leave in one call rather than one ZREM each, unless a slot stays behind among them.
if not left then
  if #taken > 0 then redis.call('ZREMRANGEBYRANK', due, 0, #taken - 1) end
elseif #taken > 0 then
  redis.call('ZREM', due, unpack(taken))
end

if #records > 0 then  -- emit, the slot ids joined as JSON text (events.py)
  redis.call('XADD', prefix .. 'events', 'MAXLEN', '~', maxlen, '*', 'type', 'queued',
    'ts', ARGV[1], 'worker', '', 'data', id_records(records))
end
emit(prefix, maxlen, now, 'queued', activated, nil)
emit(prefix, maxlen, now, 'skipped', skipped, nil)
local next_ms = -1
local head
if #ids / 2 >= limit or not left then  -- the head of `due` is the next thing to take
  head = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
else  -- past what stays behind for its time
  head = redis.call('ZRANGE', due, '(' .. until_ms, '+inf', 'BYSCORE', 'LIMIT', 0, 1,
    'WITHSCORES')
end
if #head > 0 then next_ms = tonumber(head[2]) - ahead end
if left and (next_ms < 0 or left < next_ms) then next_ms = left end
return {#records + #activated, next_ms, #skipped}
