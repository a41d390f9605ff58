--[[ claim: lease a batch of dispatched slots to one worker (queued -> running).

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms          Redis time in ms
  ARGV[2]  worker_id       also the worker's consumer name in group "workers"
  ARGV[3]  lease_ms        the lease granted: lease_until = now + lease_ms
  ARGV[4]  entries         msgpack array, 3 strings per entry: lane (the queue's dispatch
                           stream it was read from, keys.lane), msg_id (the stream entry
                           id), slot_id
  ARGV[5]  trace           optional: "1" makes each grant also carry the job's traceparent
                           and kind and the slot id (a tracing worker, scheduler/observe/tracing.py);
                           absent, the script reads and returns nothing more
  ARGV[6]  trim            optional: "0" skips trimming the streams touched (below); the
                           worker trims a shard's streams once per few hundred entries
                           claimed there, not on every call: a trim has a fixed cost
                           whatever it drops, which at small batches (low concurrency) is
                           more than the claims (bench script_ab)
  ARGV[7]  carried         optional: one character per entry, in order: "k" the worker has
                           the job's fields from the stream entry (submit.lua and promote.lua
                           copy them there when the entry is made: carry_entry in _lib.lua),
                           "a" the same for an at_most_once job, anything else (or past the
                           end) it has not. A carried entry's grant is R.GRANT without the job
                           hash read (bench script_ab)
  ARGV[8]  permitted       optional: "1" when the worker took a queue-wide permit for every
                           entry of the batch (limiter.py); anything else (or absent) it took
                           none, and an entry of a queue with a queue-wide limit is refused:
                           LIMITED

  A queue-wide limit is read here, at each call, so it applies to every claim after the call
  that set it returns (scheduler/core/limits.py): the shard's `limited` set holds the queues
  that have one. While it does not exist (no queue of the namespace has a queue-wide limit)
  that costs one EXISTS per call; else one SISMEMBER per lane of the batch.

  Reply: one flat array, each entry's answer in order, a code then its values (codes: R,
  replies.py; decoded by replies.claimed, which walks it by code)
     R.GRANT, attempt   claimed, the job's fields carried by the entry (ARGV[7]): the job as
              it was when the slot was dispatched, which is the job the slot was made for
     R.OK, attempt, task, payload, timeout_ms, delivery   claimed (5 values); the attempt
              number is the fencing token that complete/fail/release/heartbeat must present;
              timeout_ms and delivery nil when the job hash holds the default. The worker
              knows fire_ms from the slot id (JOB_ID:FIRE_MS, keys.slot_id). With trace
              "1": R.OK, ..., delivery, traceparent, kind, slot_id (8 values, decoded by
              replies.traces; traceparent and kind nil when the job hash has none)
     R.STALE  not claimable: the slot is gone, or not queued under this entry (a stale or
              duplicate entry, e.g. the slot was cancelled); the entry is acked
     R.HELD   the slot is running under this very entry (another consumer holds its
              lease, or this one did and the lease ran out: the reclaimer ends that
              attempt); the entry is left alone
     R.EARLY, nb  the slot was dispatched early (promote.lua) and its not-before time nb
              is still after now_ms: nothing changes, the entry stays with this consumer,
              which holds it until nb (reader.py). The one guard that a slot never starts
              before its time, whatever path its entry took
     R.LIMITED  the entry's queue has a queue-wide limit and the claim came without permits:
              nothing changes, the entry stays with this consumer, which hands it back
              (requeue.lua) and reads the limits again (limiter.py) before it claims more
     The same worker claiming an entry it already holds (it sent the claim again because
     the first reply was lost) gets the claim again, R.OK, ... with the same attempt and a
     fresh lease, so a lost reply never strands a slot until its lease runs out; once that
     lease has run out, HELD (see repeat_of).
  Flat, not an array per entry: a Lua table and a RESP array fewer per entry (bench
  script_ab).

  claimed_ms is now_ms. The worker passes the later of its estimate of Redis time (anchored
  to TIME, see clock.py; it can lag by a few ms under load) and the newest dispatch time in
  the batch (a stream entry id carries the time Redis stamped when the slot was queued), so a
  slot's recorded start never precedes its dispatch, which never precedes its fire time
  (worker.py, `_claim_time`).

  The lease of a running slot is visible to the reclaimer through its pending stream entry
  (XPENDING ... IDLE), except for at_most_once slots: they are acked here, so a crash after this
  point never re-runs them, and enter the shard's `leases` zset instead (scored by
  lease_until; their `msg` field is emptied). Each
  stream touched is trimmed of its acked head (trim_acked), unless trim is "0".

  Event: none. A run still going at its worker's first heartbeat is announced then, as
  "claimed" (heartbeat.lua); one that ends sooner, nearly every run, needs no event of its
  own: its end's event brings its slot, claim fields included, to history, and no "claimed"
  record per grant costs this script on every entry (bench script_ab).
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local worker = ARGV[2]
local lease_until = now + tonumber(ARGV[3])
-- Times and counters go to Redis as strings formatted once: a Lua number passed to
-- redis.call is printed with "%.14g", and that floating-point printing is a visible share of
-- Redis's CPU on the hot path (bench script_ab).
local now_s, lease_s = string.format('%d', now), string.format('%d', lease_until)
local items = cmsgpack.unpack(ARGV[4])
local n = #items / 3
local trace = ARGV[5] == '1'
local trim = ARGV[6] ~= '0'
local carried = ARGV[7] or ''
local CARRIED, CARRIED_AT_MOST_ONCE = 107, 97  -- string.byte of "k" and "a"
local limited_set = prefix .. 'limited'
-- lane -> whether its queue has a queue-wide limit; nil while no queue has one (or the
-- worker holds permits), so the unlimited path pays one EXISTS a call.
local limited = nil
if ARGV[8] ~= '1' and redis.call('EXISTS', limited_set) == 1 then limited = {} end
local REFUSED = {}

--- @include "_lib.lua"

local leases = prefix .. 'leases'

-- Inline, not in a function: a Lua call per entry is measurable on this path.
local job_fields = {'task', 'payload', 'timeout_ms', 'delivery'}
if trace then job_fields[5], job_fields[6] = 'traceparent', 'kind' end

-- A claim of a running slot's own entry by the worker holding it is that worker's claim
-- sent again (its reply was lost) only while the lease it was given lives. Past it, the
-- worker gave the run up (its watchdog stops runs before their lease ends), maybe after the
-- handler had begun: granting that attempt again would start it twice, and its ctx.once
-- marks would hide effects the first start never made. The reclaimer ends it instead.
local function repeat_of(slot_key)
  local held = redis.call('HMGET', slot_key, 'worker', 'lease_until')
  return held[1] == worker and (tonumber(held[2]) or 0) >= now
end

local reply, r = {}, 0  -- r: the reply's length so far
local touched = {}
for i = 0, n - 1 do
  local b = i * 3
  local lane_name, msg, slot_id = items[b + 1], items[b + 2], items[b + 3]
  touched[lane_name] = true
  local slot_key = prefix .. 'slot:' .. slot_id
  local k = string.byte(carried, i + 1)
  if k ~= CARRIED and k ~= CARRIED_AT_MOST_ONCE then k = nil end
  -- Four fields, and the job id only for a claim that reads the job: each one more costs
  -- every claim (bench script_ab). The worker, needed only to tell a repeated claim from
  -- another consumer's, is read in that rare branch.
  local st
  if limited then
    local refused = limited[lane_name]
    if refused == nil then
      refused = redis.call('SISMEMBER', limited_set, string.match(lane_name, '^[^:]*')) == 1
      limited[lane_name] = refused
    end
    if refused then st = REFUSED end
  end
  if not st then
    st = k and redis.call('HMGET', slot_key, 'status', 'msg', 'attempt', 'nb')
      or redis.call('HMGET', slot_key, 'status', 'msg', 'attempt', 'nb', 'job_id')
  end
  if st == REFUSED then
    r = r + 1
    reply[r] = R.LIMITED
  elseif st[1] == 'queued' and st[2] == msg and st[4] and tonumber(st[4]) > now then
    reply[r + 1], reply[r + 2] = R.EARLY, st[4]
    r = r + 2
  elseif st[1] == 'queued' and st[2] == msg then
    local attempt = (tonumber(st[3]) or 0) + 1
    local job
    if not k then job = redis.call('HMGET', prefix .. 'job:' .. st[5], unpack(job_fields)) end
    local attempt_s = string.format('%d', attempt)
    if (k and k == CARRIED_AT_MOST_ONCE) or (not k and job[4] == 'at_most_once') then
      -- Acked now, so no pending entry can show the lease: the `leases` zset does.
      redis.call('HSET', slot_key, 'status', 'running', 'attempt', attempt_s, 'worker', worker,
        'claimed_ms', now_s, 'lease_until', lease_s, 'msg', '')
      redis.call('ZADD', leases, lease_s, slot_id)
      ack(prefix, lane_name, msg)
    else
      redis.call('HSET', slot_key, 'status', 'running', 'attempt', attempt_s, 'worker', worker,
        'claimed_ms', now_s, 'lease_until', lease_s)
    end
    if k then
      reply[r + 1], reply[r + 2] = R.GRANT, attempt
      r = r + 2
    else
      reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5], reply[r + 6] =
        R.OK, attempt, job[1], job[2], job[3], job[4]
      r = r + 6
      if trace then
        reply[r + 1], reply[r + 2], reply[r + 3] = job[5], job[6], slot_id
        r = r + 3
      end
    end
  elseif st[1] == 'running' and st[2] == msg and repeat_of(slot_key) then
    redis.call('HSET', slot_key, 'lease_until', lease_s)
    if k then
      reply[r + 1], reply[r + 2] = R.GRANT, tonumber(st[3])
      r = r + 2
    else
      local job = redis.call('HMGET', prefix .. 'job:' .. st[5], unpack(job_fields))
      reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5], reply[r + 6] =
        R.OK, tonumber(st[3]), job[1], job[2], job[3], job[4]
      r = r + 6
      if trace then
        reply[r + 1], reply[r + 2], reply[r + 3] = job[5], job[6], slot_id
        r = r + 3
      end
    end
  elseif st[1] == 'running' and st[2] == msg then
    r = r + 1
    reply[r] = R.HELD
  else
    ack(prefix, lane_name, msg)
    r = r + 1
    reply[r] = R.STALE
  end
end

if trim then
  for lane_name in pairs(touched) do trim_acked(prefix .. 'q:' .. lane_name) end
end
return reply
