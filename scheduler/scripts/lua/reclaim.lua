--[[ reclaim: recover slots whose worker stopped heartbeating (running -> queued | lost |
  dead | cancelled), and dispatch entries a worker read but never claimed (queued, stuck in
  its pending list).

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  limit           most slots per pass, per source
  ARGV[4]  min_idle_ms     min idle time of pending entries (the lease length)
  ARGV[5]  q               number of lanes (dispatch streams: a queue has one per priority,
                           keys.lanes); then 2 fields per lane: lane, cursor (the first
                           pending id to look at, "-" to start)

  Where running slots are found:
  1. at_least_once / exactly_once slots keep their stream entry pending while they run, and
     workers reset its idle time with every heartbeat: XPENDING ... IDLE returns the entries
     idle past min_idle_ms (paged by the cursor when there are more than `limit`). Such an entry whose slot is running under it
     with an expired lease is reclaimed; one whose slot is still `queued` under it was read by
     a worker that died before claiming, and is acked and dispatched again; one whose slot is
     running under it with a live lease is left (the worker takes it back at its next
     heartbeat); any other entry is acked.
  2. at_most_once slots are acked at claim, so they have no pending entry: claim puts them
     in the shard's `leases` zset (score lease_until) and this script reads it.
  The slot hash is the authority for the lease. An expired attempt is recorded with outcome
  "lost" and counts as a failure (a job that crashes its worker must not loop forever): a
  slot whose cancellation was requested ends `cancelled`; at_most_once slots end `lost`;
  others are dispatched again at once under a new entry, or end `dead` (in `dlq`) when
  failures reach max_attempts. The slot's next claim issues a new token, so the old worker's
  late commit is refused.

  Reply: {reclaimed, lost, dead, redispatched, next cursors...}: counts for this pass, then one
  cursor per queue for the next call ("-" when the scan reached the end).

  Events: "reclaimed" {slot, attempt, worker}, "lost" {slot, attempt, worker}, "dead" {slot,
  attempt, outcome, error}, "redispatched" {slot}, "cancelled" {slot, attempt, error}.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local limit = tonumber(ARGV[3])
local min_idle = ARGV[4]
local q = tonumber(ARGV[5])

--- @include "_lib.lua"

local leases = prefix .. 'leases'
local reclaimed, lost, dead, redispatched, cancelled = {}, {}, {}, {}, {}

local found = {cancelled = cancelled, lost = lost, dead = dead, reclaimed = reclaimed}

-- End the expired attempt of a running slot (_lib.lua, expire_lease).
local function expire(slot_id, slot_key, s)
  local kind, record = expire_lease(prefix, slot_id, slot_key, s, now)
  local list = found[kind]
  list[#list + 1] = record
end

-- The running view of a slot, or nil.
local function running(slot_key)
  local token = redis.call('HGET', slot_key, 'attempt')
  if not token then return nil end
  return (leased(slot_key, token))
end

for _, slot_id in ipairs(redis.call('ZRANGE', leases, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)) do
  local slot_key = prefix .. 'slot:' .. slot_id
  local s = running(slot_key)
  if not s then
    redis.call('ZREM', leases, slot_id)
  elseif s.lease_until and s.lease_until > now then
    redis.call('ZADD', leases, s.lease_until, slot_id)  -- the hash knows a later lease
  else
    expire(slot_id, slot_key, s)
  end
end

local cursors = {}
for i = 0, q - 1 do
  local queue, cursor = ARGV[6 + i * 2], ARGV[7 + i * 2]
  local stream = prefix .. 'q:' .. queue
  -- XPENDING ... IDLE reads the idle entries without claiming them: an entry whose lease
  -- turns out to be live keeps its idle time and owner (XAUTOCLAIM would reset both and hide
  -- the entry for another whole lease). pcall: until a worker has created the group there is
  -- nothing to reclaim, and the command would fail the whole script.
  local out = redis.pcall('XPENDING', stream, 'workers', 'IDLE', min_idle, cursor, '+', limit)
  if out.err then out = {} end
  cursors[#cursors + 1] = #out == tonumber(limit) and ('(' .. out[#out][1]) or '-'
  for _, pending in ipairs(out) do
    local msg = pending[1]
    local entry = redis.call('XRANGE', stream, msg, msg)[1]
    local slot_id = entry and entry[2][2]
    local slot_key = slot_id and prefix .. 'slot:' .. slot_id
    local st = slot_key and redis.call('HMGET', slot_key, 'status', 'msg') or {}
    if st[1] == 'queued' and st[2] == msg then
      redis.call('XACK', stream, 'workers', msg)
      dispatch(prefix, slot_key, slot_id, queue, now)
      redispatched[#redispatched + 1] = {slot = slot_id}
    elseif st[1] == 'running' and st[2] == msg then
      local s = running(slot_key)
      if s and not (s.lease_until and s.lease_until > now) then expire(slot_id, slot_key, s) end
    else
      redis.call('XACK', stream, 'workers', msg)
    end
  end
end

emit(prefix, maxlen, now, 'reclaimed', reclaimed, nil)
emit(prefix, maxlen, now, 'lost', lost, nil)
emit(prefix, maxlen, now, 'dead', dead, nil)
emit(prefix, maxlen, now, 'redispatched', redispatched, nil)
emit(prefix, maxlen, now, 'cancelled', cancelled, nil)
local reply = {#reclaimed, #lost, #dead, #redispatched}
for _, c in ipairs(cursors) do reply[#reply + 1] = c end
return reply
