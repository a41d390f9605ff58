--[[ take: claim a queue's keyed slots (jobs with a concurrency key) for one worker, the keys
  taking turns, each under the queue's per-key limit (queued -> running).

  A keyed slot has no dispatch-stream entry: it waits in its key's queue (`kq:<queue>:<key>`,
  by priority then dispatch time: _lib.lua's key_enqueue), and its key is in the queue's ring
  (`kring:<queue>`) while that queue holds anything. Every job of a key lives in the key's
  home shard (keys.key_shard), so this one script sees all of the key's runs.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms          Redis time in ms
  ARGV[2]  worker_id
  ARGV[3]  lease_ms        the lease granted: lease_until = now + lease_ms
  ARGV[4]  queue
  ARGV[5]  n               most slots to claim (the worker's free run slots)
  ARGV[6]  trace           "1" makes each grant carry the job's traceparent, kind and slot
                           id, as claim.lua's do; "" not
  ARGV[7]  again           optional: "1" when the worker's last take of this queue on this shard
                           failed (its reply may have been lost after the script ran): the
                           queue's keyed slots running under this worker whose lease still
                           lives are granted again first, with the same attempt and a fresh
                           lease, as claim.lua grants a claim sent again. The worker starts
                           only those it does not run (its running table); past its lease such
                           a slot is the reclaimer's, as in claim.lua's repeat_of. Read from the
                           shard's `leases`, so it costs one pass over them, only then.
  ARGV[8]  permitted       optional: "1" when the worker took queue-wide permits for this
                           take (limiter.py's acquire: n is no more than it got)
  ARGV[9]  workers         optional: how many live workers take keyed slots (the worker's
                           heartbeat count), "" for one: with a per-key limit, this worker
                           runs at most its even share of it, ceil(per_key / workers), of
                           one key's slots at once (the spread), so that a busy key's runs
                           spread over the workers rather than stay with the one whose run
                           ended and asked first
  ARGV[10] mine            optional (with workers): msgpack array of key, count pairs: the
                           runs the worker holds of each key already ("" : none)

  The limits are read here, at each call, not passed by the worker, so a limit applies to
  every take after the call that set it returns (scheduler/core/limits.py):
    * the per-key limit from the shard's `klimit:<queue>` hash: concurrency (most runs of
      one key at once) and rate (most starts per second of one key, may be fractional: a
      token bucket per key, `kbucket:<queue>:<key>`, _bucket.lua, as acquire.lua's for a
      queue), each absent for none;
    * a queue-wide limit: the queue is in the shard's `limited` set. A take without
      permitted "1" then claims nothing new (limited 1 in the reply): the worker has not
      yet seen that limit, reads the limits and takes again with permits.

  The turns (the one place the rule is written): the key at the head of the ring takes its
  turn and goes to the tail, so keys with queued slots are served round-robin, whatever
  order their slots came in and however many one key has. In its turn a key starts up to its
  quantum of its best queued slots: its weight (`kweight:<queue>`, 1 when absent) times the
  call's even share, n over the ring's length at the call's start (at least 1), so a long
  ring is served a weight a turn and a short one in a few long turns, each key getting its
  share of the call; fewer when its permits in use (its runs: its members of the queue's
  running set, `kruns:<queue>`, _lib.lua's key_held) would pass per_key, or the call's n
  would, or the worker's runs of the key would pass the spread (those it holds and those
  started in this call, over all its turns), or its rate's bucket holds fewer tokens. A key whose queue empties leaves the ring: a turn that
  popped fewer than its room saw it empty; the keys of a round that started their whole room
  are checked at the round's end, in one EXISTS of them all (then one each only when some
  emptied). Turns go on until n are claimed, or every key of the
  ring had a turn in a row that started nothing (all at their limit), or the ring was walked
  once more than n: a call's work is bounded by the ring's length plus n. The turns are
  taken in rounds of keys read from the head at once (LRANGE), which then leave it (LTRIM)
  and, those still holding slots, go to the tail (RPUSH): the order one move a turn would
  give, in two calls a round; the leases are written in one ZADD a call, and so are the
  permits (the runs started in the call count against their key's limit in its later turns).

  The limit is exact: the queue's running set holds one member per running attempt,
  "<key> <slot id>#<attempt>" (_lib.lua's run_member), added here and removed when the
  attempt ends (_lib.lua's end_lease, complete.lua's fence), whatever ends it; a grant sent
  again (`again`) keeps its attempt, so its member stands. Runs an older version's take
  started hold a permit of the older form (a set per key, _lib.lua's older_running), counted
  too. The take of a later attempt removes the last attempt's members of both forms: an older
  version's end of it knows only the older form. A key at its limit has its permits checked
  against its slots first: one whose slot is not running under its attempt (left behind by a
  bug or a hand edit; of the older form, the slot id alone, whose slot is not running) is
  dropped, so a lost give-back costs at most one such check.

  A claim is the same as claim.lua's for an entry-less slot (at_most_once's path): the slot
  becomes running under a new attempt, its lease is in the shard's `leases` zset (renewed by
  heartbeat.lua, expired by reclaim.lua), and its `msg` stays "" (commits and releases fence
  on the attempt alone). A slot popped from a key's queue that is no longer `queued` (it was
  cancelled, or deleted) is dropped.

  A grant reads no job hash when the slot carries the job's fields (slot field `grant`,
  _lib.lua's grant_copy: submit.lua and promote.lua write it as they queue the slot, as
  carry_entry copies them into a stream entry): the grant is the job as it was when the
  slot was queued, as claim.lua's for a carried entry, whatever changed the job since. The
  copy serves one take: the claim's HSET empties it (its payload's bytes are freed for the
  slot's remaining life with no command more), and a slot queued again by another path
  (_lib.lua's dispatch) carries nothing, so its next grant reads the job as it is then. A
  slot without the copy (queued by such a path, one whose copy would pass 64 bytes, or
  queued before slots carried one), a grant sent again (`again`) and every grant of a take
  with trace "1" (the copy has no traceparent) read the job hash, as before.

  Reply: {ids, grants, wait_ms, limited, keys}: ids the claimed slot ids in order; grants
  claim.lua's reply for them, one R.OK, attempt, task, payload, timeout_ms, delivery (with
  trace "1": then traceparent, kind, slot id) per slot (decoded by replies.claimed); wait_ms
  how long until a key held back by its rate has a token again (the least of them), or -1;
  limited 1 when the take was refused for want of permits (above), else 0; keys the
  concurrency key of each claimed slot, in the same order (the worker counts its runs of
  each key, for spread).

  Event: none (as claim.lua).
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local worker = ARGV[2]
local lease_until = now + tonumber(ARGV[3])
local queue = ARGV[4]
local n = tonumber(ARGV[5])
local trace = ARGV[6] == '1'
local again = ARGV[7] == '1'
local permitted = ARGV[8] == '1'
local workers = tonumber(ARGV[9]) or 1
local spent = {}  -- key -> its runs this worker holds, and those started in this call
if ARGV[10] and ARGV[10] ~= '' then
  local flat = cmsgpack.unpack(ARGV[10])
  for i = 1, #flat, 2 do spent[flat[i]] = tonumber(flat[i + 1]) end
end
local now_s, lease_s = string.format('%d', now), string.format('%d', lease_until)

--- @include "_lib.lua"
--- @include "_bucket.lua"

local ring = prefix .. 'kring:' .. queue
local kq_prefix = prefix .. 'kq:' .. queue .. ':'  -- a key's queue: this and the key
local running = queue_running(prefix, queue)
local weights = prefix .. 'kweight:' .. queue
local leases = prefix .. 'leases'
local job_fields = {'task', 'payload', 'timeout_ms', 'delivery'}
if trace then job_fields[5], job_fields[6] = 'traceparent', 'kind' end

-- A key at its limit: drop its permits whose slot is not running under them (_lib.lua's
-- run_member; of the older form, "<slot id>#<attempt>" or the slot id alone, which names no
-- attempt), and count those left.
local function recount(key)
  local count = 0
  local function check(set, member, slot_id, attempt)
    local st = redis.call('HMGET', prefix .. 'slot:' .. slot_id, 'status', 'attempt')
    if st[1] == 'running' and (not attempt or st[2] == attempt) then
      count = count + 1
    else
      redis.call('ZREM', set, member)
    end
  end
  for _, member in ipairs(redis.call('ZRANGE', running, '[' .. key .. ' ', '(' .. key .. '!',
      'BYLEX')) do
    local slot_id, attempt = string.match(member, '^[^ ]* (.*)#(%d+)$')
    check(running, member, slot_id or '', attempt or '')
  end
  local older = older_running(prefix, queue, key)
  for _, member in ipairs(redis.call('ZRANGE', older, 0, -1)) do
    local slot_id, attempt = string.match(member, '^(.*)#(%d+)$')
    check(older, member, slot_id or member, attempt)
  end
  return count
end

local weighted = redis.call('EXISTS', weights) == 1  -- else every key weighs 1
local ids, grants, of = {}, {}, {}  -- of: each claimed slot's key
local rate_wait = -1

-- Add slot_id's grant to the reply (claim.lua's R.OK form), its job's fields read from the
-- job hash.
local function grant(slot_id, attempt, job_id, key)
  local job = redis.call('HMGET', prefix .. 'job:' .. job_id, unpack(job_fields))
  ids[#ids + 1] = slot_id
  of[#ids] = key
  local g = #grants
  grants[g + 1], grants[g + 2], grants[g + 3], grants[g + 4], grants[g + 5], grants[g + 6] =
    R.OK, tonumber(attempt), job[1], job[2], job[3], job[4]
  if trace then grants[g + 7], grants[g + 8], grants[g + 9] = job[5], job[6], slot_id end
end

local granted = 0
if again then
  for _, slot_id in ipairs(redis.call('ZRANGE', leases, now, '+inf', 'BYSCORE')) do
    local slot_key = prefix .. 'slot:' .. slot_id
    local st = redis.call('HMGET', slot_key, 'status', 'worker', 'attempt', 'job_id', 'queue',
      'concurrency_key', 'lease_until')
    if st[1] == 'running' and st[2] == worker and st[5] == queue and st[6]
        and (tonumber(st[7]) or 0) >= now then
      redis.call('HSET', slot_key, 'lease_until', lease_s)
      redis.call('ZADD', leases, lease_s, slot_id)
      grant(slot_id, st[3], st[4], st[6])
      granted = granted + 1
    end
  end
end
if not permitted and redis.call('SISMEMBER', prefix .. 'limited', queue) == 1 then
  return {ids, grants, -1, 1, of}
end
local limit = redis.call('HMGET', prefix .. 'klimit:' .. queue, 'concurrency', 'rate')
local per_key = tonumber(limit[1]) or -1
local rate = tonumber(limit[2]) or -1
local spread = -1  -- the most of one key's slots this worker runs at once (-1: no bound)
if per_key >= 0 and workers > 1 then spread = math.max(1, math.ceil(per_key / workers)) end
local length = redis.call('LLEN', ring)
-- A turn's quantum: the key's weight times its even share of this call (n over the ring's
-- length, at least 1), so a short ring is served in a few long turns, a long one in turns of
-- the weight; the keys still share each call evenly.
local share = math.max(1, math.floor(n / math.max(length, 1)))
-- The keys of a round's `back` (in order) that still hold slots, and the ring's length less
-- those that do not: check[i] is the key queue of back[i] when its turn may have emptied it.
-- One EXISTS of them all answers when none did (a count short of theirs names no key).
local function still_holding(back, check, length)
  local queues = {}
  for i = 1, #back do if check[i] then queues[#queues + 1] = check[i] end end
  local present = 0
  for i = 1, #queues, 1000 do  -- bounded: unpack puts every key on the Lua stack
    present = present + redis.call('EXISTS', unpack(queues, i, math.min(i + 999, #queues)))
  end
  if present == #queues then return back, length end
  local kept = {}
  for i = 1, #back do
    if not check[i] or redis.call('EXISTS', check[i]) == 1 then
      kept[#kept + 1] = back[i]
    else
      length = length - 1
    end
  end
  return kept, length
end

local leased = {}  -- ZADD leases' arguments, sent once at the end
local runs, stale = {}, {}  -- the running set's members to add (ZADD's arguments) and remove
local added = {}  -- key -> its runs started in this call (not yet in the running set)
local turns, idle = 0, 0
while granted < n and idle < length and turns < length + n do
  -- A round: the next keys from the head of the ring, read at once; each takes its turn in
  -- order, and at the round's end those taken leave the head and the ones still holding
  -- slots go to the tail in the same order (what one LMOVE a turn would do, in two calls).
  local keys = redis.call('LRANGE', ring, 0, math.min(length, n - granted) - 1)
  if #keys == 0 then break end
  local back, check, done = {}, {}, 0
  for _, key in ipairs(keys) do
    if granted >= n or idle >= length or turns >= length + n then break end
    done = done + 1
    turns = turns + 1
    local kq = kq_prefix .. key
    local room = math.min(n - granted,
      share * (weighted and tonumber(redis.call('HGET', weights, key)) or 1))
    if spread >= 0 then room = math.min(room, spread - (spent[key] or 0)) end
    if per_key >= 0 then
      local held = key_held(prefix, queue, key) + (added[key] or 0)
      if held + room > per_key then
        if held >= per_key then held = recount(key) + (added[key] or 0) end
        room = math.min(room, per_key - held)
      end
    end
    if rate > 0 and room > 0 and redis.call('EXISTS', kq) == 1 then
      -- Tokens only for slots there are: a key's bucket fills while it has nothing queued.
      local got, wait = bucket_take(prefix .. 'kbucket:' .. queue .. ':' .. key, now, rate,
        math.min(room, redis.call('ZCARD', kq)))
      if wait >= 0 and (rate_wait < 0 or wait < rate_wait) then rate_wait = wait end
      room = got
    end
    local started, emptied = 0, false
    while started < room do
      local want = room - started
      local popped = redis.call('ZPOPMIN', kq, want)
      for i = 1, #popped, 2 do
        local slot_id = popped[i]
        local slot_key = prefix .. 'slot:' .. slot_id
        local st = redis.call('HMGET', slot_key, 'status', 'msg', 'attempt', 'job_id',
          'task', 'grant')
        if st[1] == 'queued' and (not st[2] or st[2] == '') then
          local attempt = string.format('%d', (tonumber(st[3]) or 0) + 1)
          local copy = st[6] and st[6] ~= '' and st[6]  -- grant_copy's: emptied here
          if copy then
            redis.call('HSET', slot_key, 'status', 'running', 'attempt', attempt, 'worker',
              worker, 'claimed_ms', now_s, 'lease_until', lease_s, 'grant', '')
          else
            redis.call('HSET', slot_key, 'status', 'running', 'attempt', attempt, 'worker',
              worker, 'claimed_ms', now_s, 'lease_until', lease_s)
          end
          leased[#leased + 1], leased[#leased + 2] = lease_s, slot_id
          runs[#runs + 1], runs[#runs + 2] = 0, run_member(key, slot_id, attempt)
          -- The attempt before this one ended; an older version's end of it (a reclaim)
          -- knows only the older form of its permit, and a member left would pass that
          -- attempt's late commit through complete.lua's fence beside this attempt's.
          if (tonumber(st[3]) or 0) > 0 then
            stale[#stale + 1] = run_member(key, slot_id, st[3])
            redis.call('ZREM', older_running(prefix, queue, key), older_member(slot_id, st[3]))
          end
          if copy and not trace then  -- grant(), from the copy
            ids[#ids + 1] = slot_id
            of[#ids] = key
            local a = string.find(copy, ':', 1, true)
            local b = string.find(copy, ':', a + 1, true)
            local g = #grants
            grants[g + 1], grants[g + 2], grants[g + 3], grants[g + 4], grants[g + 5],
              grants[g + 6] = R.OK, tonumber(attempt), st[5],
              b < #copy and string.sub(copy, b + 1), a > 1 and string.sub(copy, 1, a - 1),
              b > a + 1 and string.sub(copy, a + 1, b - 1)
          else
            grant(slot_id, attempt, st[4], key)
          end
          started = started + 1
        end
      end
      if #popped < 2 * want then emptied = true; break end
    end
    if per_key >= 0 then added[key] = (added[key] or 0) + started end
    if spread >= 0 then spent[key] = (spent[key] or 0) + started end
    granted = granted + started
    if started > 0 then idle = 0 else idle = idle + 1 end
    -- A key that started nothing here had its queue untouched (it holds slots: it is in the
    -- ring); one that started its whole room may have emptied it: checked after the round.
    if emptied then
      length = length - 1
    else
      back[#back + 1] = key
      if started > 0 then check[#back] = kq end
    end
  end
  back, length = still_holding(back, check, length)
  redis.call('LTRIM', ring, done, -1)
  for i = 1, #back, 1000 do  -- bounded: unpack puts every key on the Lua stack
    redis.call('RPUSH', ring, unpack(back, i, math.min(i + 999, #back)))
  end
end
for i = 1, #leased, 1000 do
  redis.call('ZADD', leases, unpack(leased, i, math.min(i + 999, #leased)))
end
for i = 1, #runs, 1000 do
  redis.call('ZADD', running, unpack(runs, i, math.min(i + 999, #runs)))
end
for i = 1, #stale, 1000 do
  redis.call('ZREM', running, unpack(stale, i, math.min(i + 999, #stale)))
end
return {ids, grants, rate_wait, 0, of}
