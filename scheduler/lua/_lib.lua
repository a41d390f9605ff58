--[[ _lib: helpers shared by the transitions; scripts.py inlines this file where a script
  says `--- @include "_lib.lua"`. Defines no keys or arguments of its own.
]]

-- Append one lifecycle event (a batch of records) to the shard's capped events stream.
local function emit(prefix, maxlen, now, kind, records, worker)
  if #records == 0 then return end
  if worker then
    redis.call('XADD', prefix .. 'events', 'MAXLEN', '~', maxlen, '*',
      'type', kind, 'ts', now, 'worker', worker, 'data', cjson.encode(records))
  else
    redis.call('XADD', prefix .. 'events', 'MAXLEN', '~', maxlen, '*',
      'type', kind, 'ts', now, 'data', cjson.encode(records))
  end
end

-- Ack and delete a dispatch-stream entry; a slot's entry leaves the stream when its attempt ends.
local function drop_entry(prefix, queue, msg)
  if msg and msg ~= '' then
    local stream = prefix .. 'q:' .. queue
    redis.call('XACK', stream, 'workers', msg)
    redis.call('XDEL', stream, msg)
  end
end

-- The fenced view of a running slot: nil unless it is running under `token`.
local function leased(slot_key, token)
  local st = redis.call('HMGET', slot_key, 'status', 'token', 'msg', 'queue', 'attempt',
    'worker', 'claimed_ms', 'lease_until', 'job_id')
  if st[1] ~= 'running' or st[2] ~= token then return nil, st end
  return {msg = st[3], queue = st[4], attempt = tonumber(st[5]), worker = st[6],
    claimed_ms = tonumber(st[7]), lease_until = tonumber(st[8]), job_id = st[9]}, st
end

-- Record how the current attempt ended, as field `a:<n>` of the slot hash.
local function record_attempt(slot_key, s, token, outcome, started, finished, err)
  local rec = {number = s.attempt, worker = s.worker, token = tonumber(token),
    claimed_ms = s.claimed_ms, lease_until_ms = s.lease_until, outcome = outcome,
    started_ms = tonumber(started), finished_ms = tonumber(finished)}
  if err and err ~= '' then rec.error = err end
  redis.call('HSET', slot_key, 'a:' .. s.attempt, cjson.encode(rec))
end
