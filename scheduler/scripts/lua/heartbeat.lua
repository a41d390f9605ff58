--[[ heartbeat: extend the leases of one worker's in-flight slots in a shard, and announce
  the runs that outlived their first interval.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  lease_ms        new lease_until = now + lease_ms
  ARGV[3]  worker_id       the consumer whose pending entries get their idle time reset
  ARGV[4]  events_maxlen
  ARGV[5]  n               number of slots; then 3 fields per slot: slot_id, token (attempt),
                           new ("1": the run's first heartbeat since its claim, else "")

  The stream entry's idle time is reset with XCLAIM ... JUSTID so that a reclaimer reading
  idle entries (XPENDING ... IDLE, min-idle = lease) sees only expired leases.

  Reply: one code per slot (R, replies.py): R.OK lease extended; R.STALE lease lost (not
  running under this token; the worker must stop and not commit); R.CANCEL_REQUESTED
  extended, but cancellation was requested.

  Event: "claimed" (records {slot, attempt}) for the new slots whose lease was extended:
  claim.lua writes no event, so history learns here, within a heartbeat interval, of a run
  that is still going; a shorter one is written with its end.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local lease_until = now + tonumber(ARGV[2])
local worker = ARGV[3]
local maxlen = ARGV[4]
local n = tonumber(ARGV[5])

--- @include "_lib.lua"

local reply = {}
local records = {}
for i = 0, n - 1 do
  local b = 5 + i * 3
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
    if ARGV[b + 3] == '1' then records[#records + 1] = {slot = slot_id, attempt = tonumber(token)} end
  else
    reply[#reply + 1] = R.STALE
  end
end

emit(prefix, maxlen, now, 'claimed', records, worker)
return reply
