--[[ complete: commit a batch of successes (running -> succeeded), fenced by token.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  worker_id
  ARGV[4]  slots           msgpack array, 6 per slot: slot_id, token (the attempt number
                           claim returned, as a string), started_ms, finished_ms, lane and
                           msg_id (the dispatch-stream entry the worker claimed the slot
                           from, keys.lane; both "" when it holds none: at_most_once, or a
                           caller that does not know it). A keyed run (take.lua's), which
                           has no entry, may give its queue as lane and "~<concurrency key>"
                           as msg_id (an entry id starts with a digit)
  ARGV[5]  results         "" or a msgpack array of pairs: item number (1-based), the
                           handler's return value as JSON, kept in the slot's `result`
  ARGV[6]  logs            "" or the same pairs with the lines the run logged (JSON), kept
                           in the slot's `log:<attempt>`

  The fence without a read: a claimed entry stays pending in its lane's group exactly while
  the attempt that claimed it is the slot's current one. Every transition that ends or moves
  a running attempt acks its entry in the same script (complete, fail, release, reclaim,
  sweep, requeue), every new dispatch is a new entry, and a claim of a running slot's own
  entry grants the same attempt again. So the batch's entries are acked first, one XACK per
  lane: a lane whose every entry was still pending commits its slots without reading them
  (the HMGET was a large share of this script per slot: bench script_ab). The slots of
  any other lane (one entry among them already acked: its slot was reclaimed, or this is a
  commit sent again), and those without an entry, are checked against the slot hash as
  before: status running under this token.

  A keyed run is fenced the same way by its member of its queue's running set,
  "<key> <slot id>#<attempt>" (_lib.lua's run_member): take.lua adds it as the attempt
  starts and every end of the attempt removes it (end_lease), so it is there exactly while
  this attempt is the slot's running one. The batch's members are removed, one ZREM per
  queue: a queue whose every member was still there commits its slots without reading them
  (their permits given back by that ZREM, their leases left below). The slots of any other
  queue, including a run whose permit is of the older form (a set per key, written by an
  older version's take: not found in the queue's set), are checked against the slot hash as
  those without an entry; a member this ZREM removed was its running attempt's, so its slot
  commits there.

  Reply: one code per slot, in order (R, replies.py)
     R.OK      committed: status succeeded, the attempt's outcome and times in the slot's fields
               (outcome, started_ms, finished_ms), stream entry acked, the slot at the
               tail of the shard's `done` list as "<finished_ms>:<slot id>" (what
               retention bounds, expire.lua)
     R.STALE   refused: the slot is not running under this token (the lease was lost and
               the slot reclaimed, cancelled or already finished); nothing changed but the
               refusal event
     R.REPEAT  this very attempt's success was committed before (the worker sent it again
               because the first reply was lost); nothing changed

  Events: "succeeded" and "refused" (records {slot, token, status, current_token, outcome}),
  each only when non-empty. A "succeeded" entry whose slots all succeeded with the same
  attempt (nearly always) has that number in its field `attempt` and the slot ids alone as
  its records (["<slot id>", ...]); otherwise its records are {slot, attempt} and `attempt`
  is "". Ids alone, as records as JSON objects, one string per slot, cost this script more on
  every slot (bench script_ab). A slot id holds no character JSON escapes (keys.py:
  [A-Za-z0-9_.-] and ':'), and a token, equal to the attempt field, is an integer.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local worker = ARGV[3]
local items = cmsgpack.unpack(ARGV[4])
local n = #items / 6
local function by_item(arg)
  local out = {}
  if arg and arg ~= '' then
    local flat = cmsgpack.unpack(arg)
    for k = 1, #flat, 2 do out[flat[k]] = flat[k + 1] end
  end
  return out
end
local results, logs = by_item(ARGV[5]), by_item(ARGV[6])

--- @include "_lib.lua"

-- The entries, acked lane by lane; `fenced[lane]`: every one of them was still pending. The
-- keyed runs' members, removed queue by queue; `fenced_run[running set]`: every one was there.
-- (by_run and run_of, run_of[item] a keyed item's running set, only with a keyed item)
local by_lane, by_run, run_of = {}, nil, nil
for i = 0, n - 1 do
  local lane_name, msg = items[i * 6 + 5], items[i * 6 + 6]
  if msg ~= '' then
    if string.byte(msg) == 126 then  -- '~': a keyed run, its key after the mark
      local running = queue_running(prefix, lane_name)
      if not by_run then by_run, run_of = {}, {} end
      run_of[i] = running
      local members = by_run[running]
      if not members then members = {}; by_run[running] = members end
      members[#members + 1] = run_member(string.sub(msg, 2), items[i * 6 + 1], items[i * 6 + 2])
    else
      local ids = by_lane[lane_name]
      if not ids then ids = {}; by_lane[lane_name] = ids end
      ids[#ids + 1] = msg
    end
  end
end
local fenced = {}
for lane_name, ids in pairs(by_lane) do
  local acked = 0
  for i = 1, #ids, 1000 do  -- bounded: unpack puts every id on the Lua stack
    acked = acked + redis.call('XACK', prefix .. 'q:' .. lane_name, 'workers',
      unpack(ids, i, math.min(i + 999, #ids)))
  end
  fenced[lane_name] = acked == #ids
end
local fenced_run
if by_run then
  fenced_run = {}
  for running, members in pairs(by_run) do
    local removed = 0
    for i = 1, #members, 1000 do
      removed = removed + redis.call('ZREM', running, unpack(members, i,
        math.min(i + 999, #members)))
    end
    fenced_run[running] = removed == #members
  end
end

local reply = {}
local ended = {}  -- "<finished_ms>:<slot id>" of each: the `done` list, in one RPUSH
local done, tokens, refused = {}, {}, {}  -- done: the slots committed, with their tokens
local ends = {leases = {}, runs = {}}  -- the leases and permits of those read (end_leases)
for i = 0, n - 1 do
  local b = i * 6
  local slot_id, token = items[b + 1], items[b + 2]
  local slot_key = prefix .. 'slot:' .. slot_id
  local st  -- read only off the fenced paths: the worker is read only for a repeat
  local running = run_of and run_of[i]
  local proven
  if running then proven = fenced_run[running]
  else proven = items[b + 6] ~= '' and fenced[items[b + 5]] end
  if not proven then
    st = redis.call('HMGET', slot_key, 'status', 'attempt', 'msg', 'queue', 'priority',
      'concurrency_key')
  end
  if not st or (st[1] == 'running' and st[2] == token) then
    -- The hot path: the last attempt stays in the slot's own fields, no JSON record.
    redis.call('HSET', slot_key, 'status', 'succeeded', 'outcome', 'succeeded',
      'started_ms', items[b + 3], 'finished_ms', items[b + 4])
    ended[#ended + 1] = items[b + 4] .. ':' .. slot_id
    if results[i + 1] then redis.call('HSET', slot_key, 'result', results[i + 1]) end
    if logs[i + 1] then redis.call('HSET', slot_key, 'log:' .. token, logs[i + 1]) end
    if st then  -- its attempt ends here (a repeat XACK of an acked entry is a no-op)
      end_lease_later(prefix, slot_id, st[3], st[4], st[5], st[6], token, ends)
    elseif running then  -- its permit went with its member: its lease is left
      ends.leases[#ends.leases + 1] = slot_id
    end
    reply[i + 1] = R.OK
    done[#done + 1], tokens[#done + 1] = slot_id, token
  elseif st[1] == 'succeeded' and st[2] == token
      and redis.call('HGET', slot_key, 'worker') == worker then
    reply[i + 1] = R.REPEAT
  else
    reply[i + 1] = R.STALE
    refused[#refused + 1] = refusal(slot_id, token, st, 'succeeded')
  end
end

end_leases(prefix, ends)

if #done > 0 then
  -- Successes are most finished work: they are indexed in completion order in a list (an
  -- append per call), not in the `finished` zset (a skiplist and dict insert per slot, which
  -- cost the hot path about 2 us of Redis per job). expire.lua reads both.
  redis.call('RPUSH', prefix .. 'done', unpack(ended))
  local attempt = tokens[1]  -- the one attempt number of them all, or nil
  for i = 2, #tokens do
    if tokens[i] ~= attempt then attempt = nil; break end
  end
  local data
  if attempt then
    data = id_records(done)
  else
    local records = {}
    for i = 1, #done do records[i] = '{"slot":"' .. done[i] .. '","attempt":' .. tokens[i] .. '}' end
    data = '[' .. table.concat(records, ',') .. ']'
  end
  redis.call('XADD', prefix .. 'events', 'MAXLEN', '~', maxlen, '*', 'type', 'succeeded',
    'ts', ARGV[1], 'worker', worker, 'attempt', attempt or '', 'data', data)
end
emit(prefix, maxlen, now, 'refused', refused, worker)
return reply
