--[[ history_read: the current state of the slots and jobs a snapshot batch touches, with the
  shard's last events-stream id, read atomically (read-only; one reply instead of one per
  hash keeps the snapshotter's client cheap).

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  n               number of slot ids; then the n slot ids
  then     m               number of job ids; then the m job ids

  Reply: {last events id or "0-0", {HGETALL of each slot}, {HGETALL of each job}}; a hash that
  is gone is an empty array.
]]
local prefix = KEYS[1]
local n = tonumber(ARGV[1])
local m = tonumber(ARGV[n + 2])

local top = redis.call('XREVRANGE', prefix .. 'events', '+', '-', 'COUNT', 1)
local version = top[1] and top[1][1] or '0-0'
local slots, jobs = {}, {}
for i = 1, n do
  slots[i] = redis.call('HGETALL', prefix .. 'slot:' .. ARGV[1 + i])
end
for i = 1, m do
  jobs[i] = redis.call('HGETALL', prefix .. 'job:' .. ARGV[n + 2 + i])
end
return {version, slots, jobs}
