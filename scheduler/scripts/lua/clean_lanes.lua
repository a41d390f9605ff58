--[[ clean_lanes: drop idle lanes that hold nothing from the shard's `lanes` index, so that
  what status and the reclaimer walk follows the queues in use, not every name a namespace
  ever saw. Only the index changes: the streams, their consumer groups and whatever a worker
  reads are left as they are.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  idle_before_ms  lanes whose score (their last write, or when this script last saw
                           them hold something) is at or before this are looked at
  ARGV[3]  limit           at most this many lanes looked at per call

  A lane looked at holds something when its stream has an entry the group "workers" has not
  delivered (every entry, when there is no such group) or a pending one (delivered, not
  acked: a run in flight, which the reclaimer must be able to find). Such a lane is kept and
  scored now, to be looked at again after another idle time; any other lane leaves the index.
  Every script that adds an entry to a lane names it in the index in the same call
  (_lib.lua's index_lane), and this script runs atomically on the shard: an entry added after
  a removal indexes its lane again, so a lane that holds anything is never left out.

  The shard's `kqueues` (queues with keyed slots, scored by their last keyed dispatch) is kept
  the same way: a queue idle that long whose ring of keys is empty leaves it (its next keyed
  slot puts it back: _lib.lua's key_enqueue); one whose ring holds a key is scored now.

  Reply: {removed, kept, left, keyed_removed}: lanes removed, lanes kept (in use), lanes still
  at or before idle_before_ms after this call (more than `limit`: call again), and queues
  removed from `kqueues`.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local idle_before = ARGV[2]
local limit = tonumber(ARGV[3])

local index = prefix .. 'lanes'

-- Does this dispatch stream hold an entry not yet delivered, or delivered and not acked?
local function holds(stream)
  if redis.call('EXISTS', stream) == 0 then return false end
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', stream)
  if not ok then return true end  -- not a stream: not ours to judge, keep it listed
  for _, g in ipairs(groups) do
    local f = {}
    for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
    if f['name'] == 'workers' then
      if f['pending'] > 0 then return true end
      return #redis.call('XRANGE', stream, '(' .. f['last-delivered-id'], '+', 'COUNT', 1) > 0
    end
  end
  return redis.call('XLEN', stream) > 0
end

local removed, kept = 0, 0
local lanes = redis.call('ZRANGE', index, '-inf', idle_before, 'BYSCORE', 'LIMIT', 0, limit)
for _, lane_name in ipairs(lanes) do
  if holds(prefix .. 'q:' .. lane_name) then
    redis.call('ZADD', index, now, lane_name)
    kept = kept + 1
  else
    redis.call('ZREM', index, lane_name)
    removed = removed + 1
  end
end
local keyed, keyed_removed = prefix .. 'kqueues', 0
for _, queue in ipairs(redis.call('ZRANGE', keyed, '-inf', idle_before, 'BYSCORE', 'LIMIT', 0,
    limit)) do
  if redis.call('LLEN', prefix .. 'kring:' .. queue) > 0 then
    redis.call('ZADD', keyed, now, queue)
  else
    redis.call('ZREM', keyed, queue)
    keyed_removed = keyed_removed + 1
  end
end
return {removed, kept, redis.call('ZCOUNT', index, '-inf', idle_before), keyed_removed}
