--[[ history_read: the current state of the slots and jobs a snapshot batch touches, with the
  shard's last events-stream id, read atomically (read-only; one reply instead of one per
  hash keeps the snapshotter's client cheap).

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  slots           msgpack array of slot ids
  ARGV[2]  jobs            msgpack array of job ids (one argument each instead of thousands:
                           the snapshotter spent ~9% of its CPU encoding them one by one)

  Reply: {last events id or "0-0", {HGETALL of each slot}, {HGETALL of each job}}; a hash that
  is gone is an empty array.
]]
local prefix = KEYS[1]
local slot_ids = cmsgpack.unpack(ARGV[1])
local job_ids = cmsgpack.unpack(ARGV[2])

local top = redis.call('XREVRANGE', prefix .. 'events', '+', '-', 'COUNT', 1)
local version = top[1] and top[1][1] or '0-0'
local slots, jobs = {}, {}
for i, slot_id in ipairs(slot_ids) do
  slots[i] = redis.call('HGETALL', prefix .. 'slot:' .. slot_id)
end
for i, job_id in ipairs(job_ids) do
  jobs[i] = redis.call('HGETALL', prefix .. 'job:' .. job_id)
end
return {version, slots, jobs}
