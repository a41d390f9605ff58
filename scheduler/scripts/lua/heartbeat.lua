--[[ heartbeat: extend the leases of one worker's in-flight slots in a shard, and announce
  the runs that outlived their first interval.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  lease_ms        new lease_until = now + lease_ms
  ARGV[3]  worker_id       the consumer whose pending entries get their idle time reset
  ARGV[4]  events_maxlen
  ARGV[5]  n               number of slots; then 3 fields per slot: slot_id, token (attempt),
                           new ("1": the run's first heartbeat since its claim, else "")
  then, only when some run reported progress since the last beat (ctx.progress):
  ARGV[6+3n]  m            number of progress reports; then 4 fields each: i (the slot's
                           place above, 1-based), fraction, message ("" for none), at_ms;
                           written to the slot's progress, progress_msg, progress_ms and
                           progress_attempt fields only when its lease is extended (the
                           token fence: a stale attempt's progress is dropped)

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
local lease_until = string.format('%d', now + tonumber(ARGV[2]))  -- whole-number text
local worker = ARGV[3]
local maxlen = ARGV[4]
local n = tonumber(ARGV[5])

--- @include "_lib.lua"

local reports = {}  -- slot place -> ARGV offset of its progress
local pb = 6 + n * 3
for j = 0, (tonumber(ARGV[pb]) or 0) - 1 do
  local at = pb + j * 4
  reports[tonumber(ARGV[at + 1])] = at
end

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
    local at = reports[i + 1]
    if at then
      redis.call('HSET', slot_key, 'progress', ARGV[at + 2], 'progress_msg', ARGV[at + 3],
        'progress_ms', ARGV[at + 4], 'progress_attempt', token)
    end
    if ARGV[b + 3] == '1' then records[#records + 1] = {slot = slot_id, attempt = tonumber(token)} end
  else
    reply[#reply + 1] = R.STALE
  end
end

emit(prefix, maxlen, now, 'claimed', records, worker)
return reply
