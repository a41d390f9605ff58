--[[ key_stats: read one shard's concurrency keys (keys.py: kqueues, kring, kq, kruns, krun,
  kweight) for `sched status`, `sched queues`, the console and the exporter. Read-only: it
  changes nothing, so it is not a transition and emits no event. One call per shard, all
  pipelined (a key's queued and running slots are in its home shard, so a shard's call sees
  all of its keys' counts). The work is bounded: at most `budget` entries read per call, over
  at most MAX_QUEUES queues: ring entries (two ZCARDs each), then, with what is left, the
  shard's `leases` (an HMGET each), where the running slots name the keys whose slots all
  run (none queued: in no ring). What the budget leaves unread makes the counts lower
  bounds, and `truncated` says so.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  top     how many of each queue's busiest keys to name (by running + waiting, then
                   by key)
  ARGV[2]  budget  the most ring and lease entries to read in this call, over all its queues
  ARGV[3]  queue   only this queue ("" for every queue of the shard's `kqueues`, the most
                   recently dispatched first)

  Reply: one {queue, waiting, keys, read, truncated, top} per queue with a key queued or
  running
     waiting    queued slots of the keys read: the sum of ZCARD kq:<queue>:<key>
     keys       keys in the ring (LLEN: every key with a queued slot, read or not)
     read       keys read from the ring
     truncated  1 when the budget left ring or lease entries unread, else 0
     top        up to `top` of {key, waiting, running, weight}, the busiest first:
                waiting = ZCARD kq:<queue>:<key>, running = its permits in use (its
                members of kruns:<queue>, and of krun:<queue>:<key>, the older form), weight = its kweight:<queue> field (1 when absent)
]]
local prefix = KEYS[1]
local want = tonumber(ARGV[1])
local budget = tonumber(ARGV[2])
local only = ARGV[3]
local MAX_QUEUES = 1000

local queues
if only ~= '' then
  queues = {only}
else
  queues = redis.call('ZREVRANGE', prefix .. 'kqueues', 0, MAX_QUEUES - 1)
end

-- Whether a (busy, key) ranks before b: busier first, then the key in byte order.
local function before(a, b)
  if a[1] ~= b[1] then return a[1] > b[1] end
  return a[2] < b[2]
end

-- Per queue: {waiting, keys, read, truncated, top, seen}; `top` holds {busy, key, waiting,
-- running}, the `want` busiest so far in order (an insertion: `want` is small).
local function consider(q, key, w, r)
  local entry, top = {w + r, key, w, r}, q.top
  if want > 0 and (#top < want or before(entry, top[#top])) then
    local i = #top + 1
    while i > 1 and before(entry, top[i - 1]) do
      top[i] = top[i - 1]
      i = i - 1
    end
    top[i] = entry
    if #top > want then top[#top] = nil end
  end
end

--- @include "_lib.lua"

local order, of = {}, {}
for _, queue in ipairs(queues) do
  local ring = prefix .. 'kring:' .. queue
  local keys = redis.call('LLEN', ring)
  local n = math.min(keys, budget)
  local q = {queue = queue, waiting = 0, keys = keys, read = n, truncated = n < keys,
             top = {}, seen = {}}
  order[#order + 1], of[queue] = q, q
  if n > 0 then
    for _, key in ipairs(redis.call('LRANGE', ring, 0, n - 1)) do
      local w = redis.call('ZCARD', prefix .. 'kq:' .. queue .. ':' .. key)
      local r = key_held(prefix, queue, key)
      q.waiting = q.waiting + w
      q.seen[key] = true
      consider(q, key, w, r)
    end
    budget = budget - n
  end
end

-- Keys whose slots all run are in no ring: the running slots' hashes name them (every keyed
-- run holds a lease in `leases`), with what is left of the budget.
local leases = prefix .. 'leases'
local running = redis.call('ZCARD', leases)
if #order > 0 and running > 0 then
  local n = math.min(running, budget)
  if n > 0 then
    for _, slot_id in ipairs(redis.call('ZRANGE', leases, 0, n - 1)) do
      local f = redis.call('HMGET', prefix .. 'slot:' .. slot_id, 'queue', 'concurrency_key')
      local q = f[1] and of[f[1]]
      local key = f[2]
      if q and key and key ~= '' and not q.seen[key] then
        q.seen[key] = true
        consider(q, key, 0, key_held(prefix, q.queue, key))
      end
    end
  end
  if n < running then
    for _, q in ipairs(order) do q.truncated = true end
  end
end

local out = {}
for _, q in ipairs(order) do
  if q.keys > 0 or #q.top > 0 then
    local named = {}
    local weights = prefix .. 'kweight:' .. q.queue
    for i, e in ipairs(q.top) do
      local weight = tonumber(redis.call('HGET', weights, e[2])) or 1
      named[i] = {e[2], e[3], e[4], tostring(weight)}
    end
    out[#out + 1] = {q.queue, q.waiting, q.keys, q.read, q.truncated and 1 or 0, named}
  end
end
return out
