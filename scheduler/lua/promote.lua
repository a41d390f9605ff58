--[[ promote: move due slots to their dispatch streams (scheduled -> queued).

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  limit           at most this many slots per call
  ARGV[4]  due_before_ms   optional: take only slots due at or before this (default now_ms);
                           a node that does not own the shard passes now - 1 s, to promote
                           only what the owner has left overdue

  Slots in `due` whose score is <= due_before are taken in score order. A slot that is no longer
  `scheduled` (cancelled, or gone) is only removed from `due`. A slot goes to the lane of its
  priority (slot field `priority`, absent for the default: _lib.lua's lane()).

  Overlap: a slot with field overlap = "skip" (an occurrence of a cron job with
  overlap="skip") is dispatched only if the job's last dispatched slot (job field `active`)
  is no longer scheduled, queued or running; otherwise it ends `skipped`. Checking at
  dispatch time, not when the slot was created, is what makes "still running" mean now.

  Reply: {promoted, next_due_ms, skipped}: how many slots were dispatched, the score of the
  earliest slot still in `due` (-1 when empty), so the caller can sleep until then, and how
  many occurrences ended `skipped`.

  Events: "queued" {slot} (the slot hash holds the rest), "skipped" {slot, active} (the slot
  still active).
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local limit = tonumber(ARGV[3])
local due_before = tonumber(ARGV[4] or ARGV[1])

--- @include "_lib.lua"

local due = prefix .. 'due'
local ids = redis.call('ZRANGE', due, '-inf', due_before, 'BYSCORE', 'LIMIT', 0, limit)
local records, skipped = {}, {}

-- The other slot an overlap="skip" job still has in flight, or nil. (A retry of the active
-- slot itself comes back through `due` and must not skip itself.)
local function busy(job_key, slot_id)
  local active = redis.call('HGET', job_key, 'active')
  if not active or active == slot_id then return nil end
  local status = redis.call('HGET', prefix .. 'slot:' .. active, 'status')
  if status == 'scheduled' or status == 'queued' or status == 'running' then return active end
  return nil
end

for _, slot_id in ipairs(ids) do
  local slot_key = prefix .. 'slot:' .. slot_id
  local st = redis.call('HMGET', slot_key, 'status', 'queue', 'overlap', 'job_id', 'priority')
  if st[1] == 'scheduled' then
    local job_key = prefix .. 'job:' .. (st[4] or '')
    local active = nil
    if st[3] == 'skip' then active = busy(job_key, slot_id) end
    if active then
      redis.call('HSET', slot_key, 'status', 'skipped', 'finished_ms', now)
      skipped[#skipped + 1] = {slot = slot_id, active = active}
    else
      local msg = redis.call('XADD', prefix .. 'q:' .. lane(st[2], st[5]), '*', 's', slot_id)
      redis.call('HSET', slot_key, 'status', 'queued', 'msg', msg)
      if st[3] == 'skip' then redis.call('HSET', job_key, 'active', slot_id) end
      records[#records + 1] = {slot = slot_id}
    end
  end
end
-- The slots taken are the lowest-ranked entries of `due` (nothing above adds to it): they
-- leave in one call rather than one ZREM each.
if #ids > 0 then redis.call('ZREMRANGEBYRANK', due, 0, #ids - 1) end

emit(prefix, maxlen, now, 'queued', records, nil)
emit(prefix, maxlen, now, 'skipped', skipped, nil)
local head = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
local next_due = -1
if #head > 0 then next_due = tonumber(head[2]) end
return {#records, next_due, #skipped}
