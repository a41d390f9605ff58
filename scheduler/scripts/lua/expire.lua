--[[ expire: bound a shard's finished work by the namespace's retention settings (run by every
  scheduler node's expirer, scheduler/node/expirer.py, on the shards it owns): a finished slot
  leaves Redis once it finished more than retention_ms ago or once more than retain_max
  finished slots are younger than it, whichever comes first; a dead-lettered slot leaves
  dead_retention_ms after it died.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  retention_ms       finished slots older than this leave
  ARGV[3]  retain_max         most finished slots this shard keeps (its share of the
                              namespace's)
  ARGV[4]  dead_retention_ms  dead-lettered slots older than this leave the dead-letter set
                              and Redis
  ARGV[5]  limit              most finished and `dlq` entries looked at per call

  Finished slots are indexed in two places: successes in the `done` list, in the order they
  were committed, each entry "<finished_ms>:<slot id>" (complete.lua: an append per commit
  call, the hot path's cheap form); every other end in the `finished` zset, by finished_ms
  (_lib.lua index_finished). The two heads are read together, oldest first, and the entries
  past either bound (older than retention_ms; or more than retain_max in both together) are
  re-checked against the slot hash, and then:
  - a slot that is not terminal (replayed) or is gone only leaves its index: the transition
    that ends it again indexes it again;
  - a dead slot still in the dead-letter set only leaves `finished`: `dlq` is its index, with
    its own bound (a purge adds it back, purge.lua);
  - when the namespace keeps history (the events stream has the snapshotter's group
    `history`), a slot not yet in `retain` (which only the snapshotter writes, after its
    commit) stays and is counted as held: nothing leaves Redis before the store has it (a
    held success leaves the `done` list for `finished`, at its finished_ms, so the list's
    head moves on and the slot is looked at again at the next pass);
  - any other leaves Redis through _lib.lua's retire_slot (hash, job, indexes).
  The list is in commit order, which is finished_ms order up to the workers' clocks and the
  commit batching (a second or so): a success may leave that much later than its bound.
  A dead-lettered slot past dead_retention_ms leaves `dlq` and Redis the same way; with
  history, only once the history group has read past its death (its events are committed).
  Cron definitions, `due`, running and queued slots are never touched: only terminal slots.
  Without history, the events stream's entries older than retention_ms are trimmed too.

  Reply: {slots removed, jobs removed, dead slots removed, slots held for history,
          finished entries left (`done` and `finished`), finished_ms of the oldest left or -1}
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local retention = tonumber(ARGV[2])
local retain_max = tonumber(ARGV[3])
local dead_retention = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])

--- @include "_lib.lua"

local terminal = {succeeded = true, dead = true, cancelled = true, lost = true, skipped = true}
local finished_key, retain, dlq = prefix .. 'finished', prefix .. 'retain', prefix .. 'dlq'
local events = prefix .. 'events'

-- The history group's floor (ms): every event below it was read and committed by a
-- snapshotter (acks follow commits). nil: the namespace keeps no history.
local history, floor_ms = false, nil
if redis.call('EXISTS', events) == 1 then
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', events)) do
    local name, delivered
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then delivered = g[i + 1] end
    end
    if name == 'history' then
      history = true
      local low = delivered
      local pending = redis.call('XPENDING', events, name)
      if pending[1] > 0 then low = pending[2] end
      floor_ms = tonumber(string.match(low, '^(%d+)-'))
    end
  end
end

local slots, jobs, dead, held, newest = 0, 0, 0, 0, 0
local cutoff = now - retention
if not history and redis.call('EXISTS', events) == 1 then
  -- With no snapshotter, nothing reads events past the window: they leave with the work
  -- they describe, not at the stream's MAXLEN cap (whole stream nodes only: cheap).
  redis.call('XTRIM', events, 'MINID', '~', cutoff)
end
local done_key = prefix .. 'done'
local excess = redis.call('LLEN', done_key) + redis.call('ZCARD', finished_key) - retain_max

-- "<finished_ms>:<slot id>" -> finished_ms, slot id (0, nil: not an entry, dropped)
local function listed(entry)
  local at, slot_id = string.match(entry, '^([^:]*):(.+)$')
  at = tonumber(at)
  if not at then return 0, nil end
  return at, slot_id
end

-- One finished slot past a bound, its entry already out of the `done` list when it came from
-- there: out of its index, held for the history store, or out of Redis.
local function settle(slot_id, at, from_list)
  local st = redis.call('HMGET', prefix .. 'slot:' .. slot_id, 'status', 'job_id')
  if not terminal[st[1]] then
    if not from_list then redis.call('ZREM', finished_key, slot_id) end
  elseif st[1] == 'dead' and redis.call('ZSCORE', dlq, slot_id) then
    if not from_list then redis.call('ZREM', finished_key, slot_id) end
  elseif history and not redis.call('ZSCORE', retain, slot_id) then
    held = held + 1
    if from_list then redis.call('ZADD', finished_key, at, slot_id) end
  else
    if history then redis.call('ZREM', retain, slot_id) end
    slots = slots + 1
    jobs = jobs + retire_slot(prefix, slot_id, st[2])
    newest = math.max(newest, at)
  end
end

-- Only the entries past a bound are read: the two heads merged, oldest first, while an
-- entry is older than cutoff or one of the oldest `excess`.
local list_head = redis.call('LRANGE', done_key, 0, limit - 1)
local set_head = redis.call('ZRANGE', finished_key, 0, limit - 1, 'WITHSCORES')
local li, si, seen = 1, 1, 0
while seen < limit do
  local l_at, l_id, s_at
  if list_head[li] then l_at, l_id = listed(list_head[li]) end
  if set_head[si] then s_at = tonumber(set_head[si + 1]) end
  local from_list = l_at ~= nil and (s_at == nil or l_at <= s_at)
  local at = from_list and l_at or s_at
  if at == nil or (at > cutoff and seen >= excess) then break end
  seen = seen + 1
  if from_list then
    li = li + 1
    if l_id then settle(l_id, at, true) end
  else
    settle(set_head[si], at, false)
    si = si + 2
  end
end
if li > 1 then redis.call('LTRIM', done_key, li - 1, -1) end

-- Dead-lettered slots past their own bound. Their `dlq` score is the `now` of the script that
-- buried them, the same clock as their event's id: a second of margin covers the rounding.
local dead_cutoff = now - dead_retention
if history then dead_cutoff = math.min(dead_cutoff, (floor_ms or 0) - 1000) end
for _, slot_id in ipairs(redis.call('ZRANGE', dlq, '-inf', dead_cutoff, 'BYSCORE', 'LIMIT', 0, limit)) do
  local st = redis.call('HMGET', prefix .. 'slot:' .. slot_id, 'status', 'job_id', 'finished_ms')
  redis.call('ZREM', dlq, slot_id)
  if st[1] == 'dead' then
    dead = dead + 1
    jobs = jobs + retire_slot(prefix, slot_id, st[2])
    local at = tonumber(st[3]) or 0
    if at > newest then newest = at end
  end
end
note_retired(prefix, newest)

local oldest = redis.call('ZRANGE', finished_key, 0, 0, 'WITHSCORES')
oldest = oldest[2] and tonumber(oldest[2]) or -1
local first = redis.call('LINDEX', done_key, 0)
if first then
  local at = listed(first)
  if oldest < 0 or at < oldest then oldest = at end
end
return {slots, jobs, dead, held, redis.call('LLEN', done_key) + redis.call('ZCARD', finished_key),
  oldest}
