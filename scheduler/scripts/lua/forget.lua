--[[ forget: remove ended jobs from Redis now, with every key of their own and their entries in
  the shard's indexes (`sched verify` removes its canaries so, once it has judged them: a
  run leaves no key behind). A job with a slot that has not ended is left whole.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]     a job id of this shard
  ARGV[2..n]  more job ids of this shard

  A job's slots are those `runs:<job_id>` indexes, or its one slot (`<job_id>:<fire_ms>`).
  When every one is terminal (or gone), each leaves `finished`, `retain`, `dlq`, `due` and
  Redis; the job leaves `jobs` and `cron` and Redis, with its `runs` index, its submit
  marker, its fire ledger (`fires`) and its objective counts (`ontime`). A success's entry in `done` stays: the expirer drops an entry whose slot is gone
  (expire.lua), and finding it here would read the whole list. Its events stay in the capped
  stream, and the history store keeps what the snapshotter read.

  A job Redis does not hold is skipped.

  Reply: {jobs removed, keys removed, jobs left (a slot not ended)}
]]
local prefix = KEYS[1]

local terminal = {succeeded = true, dead = true, cancelled = true, lost = true, skipped = true}
local removed, keys, left = 0, 0, 0

for i = 1, #ARGV do
  local job_id = ARGV[i]
  local job_key = prefix .. 'job:' .. job_id
  local runs = prefix .. 'runs:' .. job_id
  local slots = redis.call('ZRANGE', runs, 0, -1)
  local own = redis.call('HGET', job_key, 'fire_ms')
  if #slots == 0 and own then slots = {job_id .. ':' .. own} end
  local ended = true
  for _, slot_id in ipairs(slots) do
    local status = redis.call('HGET', prefix .. 'slot:' .. slot_id, 'status')
    if status and not terminal[status] then ended = false end
  end
  if #slots == 0 and redis.call('EXISTS', job_key) == 0 then
    -- not in Redis: nothing to remove, nothing counted
  elseif not ended then
    left = left + 1
  else
    for _, slot_id in ipairs(slots) do
      for _, index in ipairs({'finished', 'retain', 'dlq', 'due'}) do
        redis.call('ZREM', prefix .. index, slot_id)
      end
      keys = keys + redis.call('DEL', prefix .. 'slot:' .. slot_id)
    end
    redis.call('ZREM', prefix .. 'jobs', job_id)
    redis.call('ZREM', prefix .. 'cron', job_id)
    keys = keys + redis.call('DEL', job_key, runs, prefix .. 'submitted:' .. job_id,
      prefix .. 'fires:' .. job_id, prefix .. 'ontime:' .. job_id)
    removed = removed + 1
  end
end
return {removed, keys, left}
