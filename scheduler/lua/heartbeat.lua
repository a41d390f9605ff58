--[[ heartbeat: extend the leases of one worker's in-flight slots in a shard.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  lease_ms        new lease_until = now + lease_ms
  ARGV[3]  worker_id       the consumer whose pending entries get their idle time reset
  ARGV[4]  n               number of slots; then 2 fields per slot: slot_id, token (attempt)

  The stream entry's idle time is reset with XCLAIM ... JUSTID so that a reclaimer reading
  idle entries (XPENDING ... IDLE, min-idle = lease) sees only expired leases.

  Reply: one code per slot (R, replies.py): R.OK lease extended; R.STALE lease lost (not
  running under this token; the worker must stop and not commit); R.CANCEL_REQUESTED
  extended, but cancellation was requested.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local lease_until = now + tonumber(ARGV[2])
local worker = ARGV[3]
local n = tonumber(ARGV[4])

--- @include "_lib.lua"

local reply = {}
for i = 0, n - 1 do
  local b = 4 + i * 2
  local slot_id, token = ARGV[b + 1], ARGV[b + 2]
  local slot_key = prefix .. 'slot:' .. slot_id
  local st = redis.call('HMGET', slot_key, 'status', 'attempt', 'msg', 'queue', 'cancel',
    'priority')
  if st[1] == 'running' and st[2] == token then
    redis.call('HSET', slot_key, 'lease_until', lease_until)
    if st[3] and st[3] ~= '' then
      redis.call('XCLAIM', prefix .. 'q:' .. lane(st[4], st[6]), 'workers', worker, 0, st[3], 'JUSTID')
    else  -- at_most_once: no pending entry; its lease lives in the `leases` zset
      redis.call('ZADD', prefix .. 'leases', 'XX', lease_until, slot_id)
    end
    if st[5] and st[5] ~= '' then reply[#reply + 1] = R.CANCEL_REQUESTED else reply[#reply + 1] = R.OK end
  else
    reply[#reply + 1] = R.STALE
  end
end
return reply
