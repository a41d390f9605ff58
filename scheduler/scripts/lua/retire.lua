--[[ retire: remove terminal slots whose retention in Redis is over (their final state is in
  the history store: only the snapshotter, after its commit, adds them to `retain`).

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  retention_ms    how long a finished slot stays in Redis
  ARGV[3]  limit           most slots per call

  Entries of `retain` scored <= now are taken in order and re-checked against the slot hash:
  a slot that is no longer terminal (replayed) or still in the dead-letter set only leaves
  `retain` (the snapshotter adds it again when it ends or is purged); one that finished less
  than retention_ms ago (it ended again after a replay) is re-scored. Otherwise it leaves
  Redis through _lib.lua's retire_slot, the one removal of finished work (expire.lua's too).

  Reply: {slots deleted, jobs deleted, score of the earliest entry left or -1}
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local retention = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])

local terminal = {succeeded = true, dead = true, cancelled = true, lost = true, skipped = true}
local retain = prefix .. 'retain'
local slots, jobs, newest = 0, 0, 0

--- @include "_lib.lua"

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
    slots = slots + 1
    jobs = jobs + retire_slot(prefix, slot_id, st[3])
    if finished and finished > newest then newest = finished end
  end
end
note_retired(prefix, newest)

local head = redis.call('ZRANGE', retain, 0, 0, 'WITHSCORES')
return {slots, jobs, head[2] and tonumber(head[2]) or -1}
