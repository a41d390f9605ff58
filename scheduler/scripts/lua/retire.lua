--[[ retire: remove terminal slots whose retention in Redis is over (their final state is in
  the history store: only the snapshotter, after its commit, adds them to `retain`).

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  retention_ms    how long a finished slot stays in Redis
  ARGV[3]  limit           most slots per call

  Entries of `retain` scored <= now are taken in order and re-checked against the slot hash:
  a slot that is no longer terminal (replayed) or still in the dead-letter set only leaves
  `retain` (the snapshotter adds it again when it ends or is purged); one that finished less
  than retention_ms ago (it ended again after a replay) is re-scored. Otherwise the slot hash
  is deleted (and leaves its job's `runs:<job_id>` index), and its job hash too when that was
  the job's only slot and the job does not recur (kind ~= "cron"; it also leaves the `jobs`
  index). A recurring job's definition stays: it is small and `sched jobs show` reads it.

  Reply: {slots deleted, jobs deleted, score of the earliest entry left or -1}
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local retention = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])

local terminal = {succeeded = true, dead = true, cancelled = true, lost = true, skipped = true}
local retain = prefix .. 'retain'
local slots, jobs = 0, 0

-- The entries due are the lowest-ranked ones: they leave `retain` in one call, and the few
-- that must stay are added back below.
local due = redis.call('ZRANGE', retain, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
if #due > 0 then redis.call('ZREMRANGEBYRANK', retain, 0, #due - 1) end

for _, slot_id in ipairs(due) do
  local slot_key = prefix .. 'slot:' .. slot_id
  local st = redis.call('HMGET', slot_key, 'status', 'finished_ms', 'job_id')
  local finished = tonumber(st[2])
  if not terminal[st[1]] then
    -- replayed or already gone
  elseif st[1] == 'dead' and redis.call('ZSCORE', prefix .. 'dlq', slot_id) then
    -- kept for the operator; a purge brings it back here
  elseif finished and finished + retention > now then
    redis.call('ZADD', retain, string.format('%d', finished + retention), slot_id)
  else
    local job_id = st[3]
    local job_key = prefix .. 'job:' .. job_id
    local job = redis.call('HMGET', job_key, 'kind', 'fire_ms')  -- kind is absent: immediate
    slots = slots + 1
    if job[1] == 'cron' then
      redis.call('DEL', slot_key)
      redis.call('ZREM', prefix .. 'runs:' .. job_id, slot_id)
    elseif job[2] and (job_id .. ':' .. job[2]) == slot_id then
      redis.call('DEL', slot_key, job_key)
      if job[1] then redis.call('ZREM', prefix .. 'jobs', job_id) end  -- immediate: not indexed
      jobs = jobs + 1
    else
      redis.call('DEL', slot_key)
    end
  end
end

local head = redis.call('ZRANGE', retain, 0, 0, 'WITHSCORES')
return {slots, jobs, head[2] and tonumber(head[2]) or -1}
