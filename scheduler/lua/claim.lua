--[[ claim: lease a batch of dispatched slots to one worker (queued -> running).

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms          Redis time in ms
  ARGV[2]  events_maxlen
  ARGV[3]  worker_id       also the worker's consumer name in group "workers"
  ARGV[4]  lease_ms        the lease granted: lease_until = now + lease_ms
  ARGV[5]  n               number of stream entries; then 3 fields per entry:
           queue, msg_id (the stream entry id), slot_id

  Reply: one array per entry, in order
     {1, token, attempt, task, payload, timeout_ms, delivery, fire_ms}  claimed
     {0}   not claimable: the slot is gone, or not queued under this entry (a stale or
           duplicate entry, e.g. the slot was cancelled); the entry is acked and deleted
     {-1}  the slot is running under this very entry (another consumer holds its lease);
           the entry is left alone

  A new fencing token is issued on every claim; complete/fail/release/heartbeat must present
  it. at_most_once slots are acked here, so a crash after this point never re-runs them.

  Event: type "claimed" (worker, lease_until, records {slot, attempt, token}).
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local worker = ARGV[3]
local lease_until = now + tonumber(ARGV[4])
local n = tonumber(ARGV[5])

local reply = {}
local records = {}
for i = 0, n - 1 do
  local b = 5 + i * 3
  local queue, msg, slot_id = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3]
  local stream = prefix .. 'q:' .. queue
  local slot_key = prefix .. 'slot:' .. slot_id
  local st = redis.call('HMGET', slot_key, 'status', 'msg', 'job_id', 'fire_ms')
  if st[1] == 'queued' and st[2] == msg then
    local token = redis.call('HINCRBY', slot_key, 'token', 1)
    local attempt = redis.call('HINCRBY', slot_key, 'attempt', 1)
    local job = redis.call('HMGET', prefix .. 'job:' .. st[3],
      'task', 'payload', 'timeout_ms', 'delivery')
    redis.call('HSET', slot_key, 'status', 'running', 'worker', worker,
      'claimed_ms', now, 'lease_until', lease_until)
    if job[4] == 'at_most_once' then
      redis.call('XACK', stream, 'workers', msg)
      redis.call('XDEL', stream, msg)
      redis.call('HSET', slot_key, 'msg', '')
    end
    reply[#reply + 1] = {1, token, attempt, job[1], job[2], job[3], job[4], st[4]}
    records[#records + 1] = {slot = slot_id, attempt = attempt, token = token}
  elseif st[1] == 'running' and st[2] == msg then
    reply[#reply + 1] = {-1}
  else
    redis.call('XACK', stream, 'workers', msg)
    redis.call('XDEL', stream, msg)
    reply[#reply + 1] = {0}
  end
end

if #records > 0 then
  redis.call('XADD', prefix .. 'events', 'MAXLEN', '~', maxlen, '*',
    'type', 'claimed', 'ts', now, 'worker', worker, 'lease_until', lease_until,
    'data', cjson.encode(records))
end
return reply
