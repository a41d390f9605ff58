--[[ sweep: find slots that nothing will move again, and set them going (nothing stays stuck
  without escalation). The sweeper (scheduler/node/sweeper.py) walks the
  namespace's slot hashes with SCAN and passes each shard's slot ids here.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  slot ids, separated by single spaces (one argument: an argument per id cost the
           sweeper more than the script)

  What is an orphan, and what is done to it (fenced like every transition: the slot hash,
  read here, is the authority):
  - `scheduled` but not in `due`: added back at its available_ms ("rescheduled");
  - `queued` whose dispatch entry is gone (deleted, trimmed, never written), or was delivered
    and acked without a claim (its id is at or before the group's last-delivered id and it is
    not pending): dispatched again under a new entry, the old one acked ("redispatched");
    one with a concurrency key: missing from its key's queue, put back ("redispatched");
  - `running`, at_least_once or exactly_once, whose pending entry is gone (acked, group
    recreated): once its lease is over, its attempt ends as an expired lease does in reclaim
    (_lib.lua, expire_lease: "reclaimed" | "dead" | "cancelled"); while the lease is live it
    is counted as waiting (its worker may still commit it, or die and leave it to the next
    sweep);
  - `running`, at_most_once, missing from the shard's `leases` set: put back in it at its
    lease_until ("reindexed"), or, lease over, ended as reclaim would ("lost").
  - `running` with a concurrency key and a live lease: its member of the queue's running set
    ("<key> <slot id>#<attempt>", _lib.lua's run_member) is added back when missing, unless
    one of the older form (_lib.lua's older_running) stands for it. Not an orphan: no event,
    no count.
  - finished (not dead-lettered) but missing from the shard's `finished` index (ended before
    transitions indexed it, or by one that failed to): indexed at its finished_ms, so the
    namespace's retention (expire.lua) finds it. A success is looked for in the `done` list
    instead, which has no lookup: it is taken as missing when it finished before the list's
    head (the list is in commit order), so at worst it is indexed in both, which expire.lua
    settles (the second entry finds the slot gone). Not an orphan: no event, no count.
  A slot in any other state, or gone, is left alone.

  Reply: {redispatched, rescheduled, reindexed, reclaimed, lost, dead, cancelled, waiting}

  Events: "orphaned" {slot, was (its status when found), action (from the list above)};
  the shard's `stats` hash counts `orphans` and stamps `orphans_last_ms`.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]

--- @include "_lib.lua"

local ACTIONS = {'redispatched', 'rescheduled', 'reindexed', 'reclaimed', 'lost', 'dead',
  'cancelled'}
local LIVE = {scheduled = true, queued = true, running = true}
local TERMINAL = {succeeded = true, dead = true, cancelled = true, lost = true, skipped = true}
local counts = {}
for _, a in ipairs(ACTIONS) do counts[a] = 0 end
local waiting = 0
local records = {}
local delivered = {}  -- queue -> the group's last-delivered id, or false without a group
-- finished_ms of the `done` list's head: a success that finished before it is in no index
local first = redis.call('LINDEX', prefix .. 'done', 0)
local listed_from = first and tonumber(string.match(first, '^([^:]*):')) or math.huge

local function found(slot_id, was, action)
  counts[action] = counts[action] + 1
  records[#records + 1] = {slot = slot_id, was = was, action = action}
end

-- Is entry id a at or before b? ("<ms>-<seq>")
local function at_or_before(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, bm = tonumber(am), tonumber(bm)
  return am < bm or (am == bm and tonumber(as) <= tonumber(bs))
end

local function last_delivered(queue, stream)
  if delivered[queue] == nil then
    delivered[queue] = false
    local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', stream)
    if ok then
      for _, g in ipairs(groups) do
        local f = {}
        for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
        if f['name'] == 'workers' then delivered[queue] = f['last-delivered-id'] end
      end
    end
  end
  return delivered[queue]
end

-- Is `msg` pending in the group (false too when the group is gone)?
local function pending(stream, msg)
  local ok, out = pcall(redis.call, 'XPENDING', stream, 'workers', msg, msg, 1)
  return ok and #out > 0
end

-- A queued slot is stranded when no worker can read its entry now or later.
local function stranded(queue, msg)
  if not msg or msg == '' then return true end
  local stream = prefix .. 'q:' .. queue
  if #redis.call('XRANGE', stream, msg, msg) == 0 then return true end
  if pending(stream, msg) then return false end
  local last = last_delivered(queue, stream)
  return last and at_or_before(msg, last)
end

for slot_id in string.gmatch(ARGV[3], '%S+') do
  local slot_key = prefix .. 'slot:' .. slot_id
  -- Most slots a walk meets are finished: their status alone settles them (one field read,
  -- not six: the sweep's cost is per key of the whole retention window).
  local status = redis.call('HGET', slot_key, 'status')
  local st = LIVE[status] and redis.call('HMGET', slot_key, 'status', 'msg', 'queue', 'attempt',
    'available_ms', 'fire_ms', 'priority', 'concurrency_key')
  if not st then
    -- finished, or gone since SCAN saw it: nothing to repair but a missing `finished` entry
    if TERMINAL[status] and not redis.call('ZSCORE', prefix .. 'finished', slot_id)
        and not (status == 'dead' and redis.call('ZSCORE', prefix .. 'dlq', slot_id)) then
      local at = tonumber(redis.call('HGET', slot_key, 'finished_ms')) or now
      if status ~= 'succeeded' or at < listed_from then index_finished(prefix, slot_id, at) end
    end
  elseif status == 'scheduled' then
    if not redis.call('ZSCORE', prefix .. 'due', slot_id) then
      redis.call('ZADD', prefix .. 'due', st[5] or st[6], slot_id)
      found(slot_id, status, 'rescheduled')
    end
  elseif status == 'queued' and st[3] and st[8] then
    -- keyed: stranded when out of its key's queue (key_enqueue puts it back, and its key
    -- in the ring)
    if not redis.call('ZSCORE', prefix .. 'kq:' .. st[3] .. ':' .. st[8], slot_id) then
      dispatch(prefix, slot_key, slot_id, st[3], now)
      found(slot_id, status, 'redispatched')
    end
  elseif status == 'queued' and st[3] then
    local its_lane = lane(st[3], st[7])
    if stranded(its_lane, st[2]) then
      if st[2] and st[2] ~= '' then ack(prefix, its_lane, st[2]) end
      dispatch(prefix, slot_key, slot_id, its_lane, now)
      found(slot_id, status, 'redispatched')
    end
  elseif status == 'running' and st[4] then
    local s = leased(slot_key, st[4])
    local amo = not s.msg or s.msg == ''
    if s.key and (s.lease_until or 0) > now then  -- a live keyed run holds its key's permit
      -- (its member, unless a permit of the older form holds it)
      local older = redis.call('ZMSCORE', older_running(prefix, s.queue, s.key), slot_id,
        older_member(slot_id, st[4]))
      if not older[1] and not older[2] then
        redis.call('ZADD', queue_running(prefix, s.queue), 'NX', 0,
          run_member(s.key, slot_id, st[4]))
      end
    end
    local lost_index
    if amo then
      lost_index = not redis.call('ZSCORE', prefix .. 'leases', slot_id)
    else
      lost_index = not pending(prefix .. 'q:' .. s.lane, s.msg)
    end
    if lost_index then
      if not (s.lease_until and s.lease_until > now) then
        found(slot_id, status, (expire_lease(prefix, slot_id, slot_key, s, now)))
      elseif amo then
        redis.call('ZADD', prefix .. 'leases', s.lease_until, slot_id)
        found(slot_id, status, 'reindexed')
      else
        waiting = waiting + 1
      end
    end
  end
end

if #records > 0 then
  redis.call('HINCRBY', prefix .. 'stats', 'orphans', #records)
  redis.call('HSET', prefix .. 'stats', 'orphans_last_ms', now)
  emit(prefix, maxlen, now, 'orphaned', records, nil)
end
local reply = {}
for _, a in ipairs(ACTIONS) do reply[#reply + 1] = counts[a] end
reply[#reply + 1] = waiting
return reply
