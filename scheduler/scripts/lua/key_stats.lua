--[[ key_stats: read one shard's concurrency keys (keys.py: kqueues, kring, kq, krun,
  kweight) for `sched status`, `sched queues`, the console and the exporter. Read-only: it
  changes nothing, so it is not a transition and emits no event. One call per shard, all
  pipelined (a key's queued and running slots are in its home shard, so a shard's call sees
  all of its keys' counts). The work is bounded: at most `budget` ring entries read per
  call, over at most MAX_QUEUES queues, two ZCARDs each; a queue's ring past the budget is
  not read (its counts are then lower bounds, and `truncated` says so).

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  top     how many of each queue's busiest keys to name (by running + waiting, then
                   by key)
  ARGV[2]  budget  the most ring entries to read in this call, over all its queues
  ARGV[3]  queue   only this queue ("" for every queue of the shard's `kqueues`, the most
                   recently dispatched first)

  Reply: one {queue, waiting, keys, read, truncated, top} per queue whose ring holds a key
     waiting    queued slots of the keys read: the sum of ZCARD kq:<queue>:<key>
     keys       keys in the ring (LLEN: every key with a queued slot, read or not)
     read       keys read from the ring
     truncated  1 when the budget left fewer than `keys` to read, else 0
     top        up to `top` of {key, waiting, running, weight}, the busiest first:
                waiting = ZCARD kq:<queue>:<key>, running = ZCARD krun:<queue>:<key> (its
                permits in use), weight = its kweight:<queue> field (1 when absent)
  A key whose slots all run (none queued) is not in the ring and not read.
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

local out = {}
for _, queue in ipairs(queues) do
  local ring = prefix .. 'kring:' .. queue
  local keys = redis.call('LLEN', ring)
  if keys > 0 then
    local n = math.min(keys, budget)
    local waiting, top = 0, {}
    if n > 0 then
      for _, key in ipairs(redis.call('LRANGE', ring, 0, n - 1)) do
        local w = redis.call('ZCARD', prefix .. 'kq:' .. queue .. ':' .. key)
        local r = redis.call('ZCARD', prefix .. 'krun:' .. queue .. ':' .. key)
        waiting = waiting + w
        -- Keep the `want` busiest in order: an insertion, since `want` is small.
        local entry = {w + r, key, w, r}
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
      budget = budget - n
    end
    local named = {}
    local weights = prefix .. 'kweight:' .. queue
    for i, e in ipairs(top) do
      local weight = tonumber(redis.call('HGET', weights, e[2])) or 1
      named[i] = {e[2], e[3], e[4], tostring(weight)}
    end
    out[#out + 1] = {queue, waiting, keys, n, n < keys and 1 or 0, named}
  end
end
return out
