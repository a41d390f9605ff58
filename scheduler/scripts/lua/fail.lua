--[[ fail: end a batch of failed attempts, fenced by token (running -> scheduled | dead |
  cancelled).

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  worker_id
  ARGV[4]  n               number of slots; then 8 fields per slot:
           slot_id, token (the attempt number claim returned),
           outcome         "failed" | "retried" (the handler raised Retry) | "timed_out" |
                           "cancelled" (the handler raised Cancel)
           error           one line for people
           retry_ms        delay before the retry; -1 = from the job's retry policy
           u               uniform random in [0, 1) for the policy's jitter
           started_ms, finished_ms
  ARGV[5 + 8n]  logs       (optional) msgpack array of pairs: item number (1-based), the
                           lines the run logged (JSON), kept in the slot's `log:<attempt>`

  An at_most_once job's failure (Retry raised included) ends it dead at once: it never starts
  twice. The policy delay after f failures: min(backoff_max_ms, backoff_base_ms * 2^(f-1)) *
  (1 - jitter * u). A retry goes back through the `due` set (the promoter dispatches it).
  Job fields missing from the hash take their defaults: `DEFAULT.<field>` (replaced at load by
  models.JOB_FIELD_DEFAULTS; job_fields stores no field equal to its default).

  Reply: one code per slot, in order (R, replies.py)
     R.RETRY      retry scheduled (status scheduled, in `due` at now + delay)
     R.DEAD       failures reached max_attempts (an at_most_once job: its first); status dead,
                  in the shard's `dlq`
     R.CANCELLED  cancelled (terminal)
     R.STALE      refused: not running under this token; nothing changed but the refusal
                  event
     R.REPEAT     this attempt's failure was recorded before with this outcome (the worker
                  sent it again because the first reply was lost); nothing changed

  Events: "retry" {slot, attempt, outcome, available_ms, error}, "dead" {slot, attempt,
  outcome, error}, "cancelled" {slot, attempt, error}, "refused" {slot, token, status,
  current_token, outcome}.
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local worker = ARGV[3]
local n = tonumber(ARGV[4])

--- @include "_lib.lua"

-- Did this attempt already end with `outcome`? (Its record `a:<token>` says; a reclaim
-- records "lost", which no worker sends.)
local function recorded(slot_key, token, outcome)
  local rec = redis.call('HGET', slot_key, 'a:' .. token)
  return rec and cjson.decode(rec).outcome == outcome
end

local logs = {}
if ARGV[5 + 8 * n] then
  local flat = cmsgpack.unpack(ARGV[5 + 8 * n])
  for k = 1, #flat, 2 do logs[flat[k]] = flat[k + 1] end
end

local reply = {}
local retried, dead, cancelled, refused = {}, {}, {}, {}
for i = 0, n - 1 do
  local b = 4 + i * 8
  local slot_id, token, outcome, err = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  local retry_ms, u = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
  local slot_key = prefix .. 'slot:' .. slot_id
  local s, st = leased(slot_key, token)
  if not s and st[2] == token and st[5] == worker and recorded(slot_key, token, outcome) then
    reply[i + 1] = R.REPEAT
  elseif not s then
    reply[i + 1] = R.STALE
    refused[#refused + 1] = refusal(slot_id, token, st, outcome)
  else
    local record = attempt_record(s, outcome, ARGV[b + 7], ARGV[b + 8], err)
    end_lease(prefix, slot_id, s)
    if logs[i + 1] then redis.call('HSET', slot_key, 'log:' .. token, logs[i + 1]) end
    if outcome == 'cancelled' then
      redis.call('HSET', slot_key, 'status', 'cancelled', 'finished_ms', now, 'a:' .. token, record)
      index_finished(prefix, slot_id, now)
      reply[i + 1] = R.CANCELLED
      cancelled[#cancelled + 1] = {slot = slot_id, attempt = s.attempt, error = err}
    else
      local failures = redis.call('HINCRBY', slot_key, 'failures', 1)
      local job = redis.call('HMGET', prefix .. 'job:' .. s.job_id, 'max_attempts',
        'backoff_base_ms', 'backoff_max_ms', 'jitter', 'delivery')
      -- An at_most_once job never starts twice (its handler may have had its effect before
      -- it failed): its first failure is final, whatever attempts its policy has left.
      if job[5] ~= 'at_most_once' and failures < (tonumber(job[1]) or DEFAULT.max_attempts) then
        if retry_ms < 0 then
          local base, cap = tonumber(job[2]) or DEFAULT.backoff_base_ms,
            tonumber(job[3]) or DEFAULT.backoff_max_ms
          local jitter = tonumber(job[4]) or DEFAULT.jitter
          retry_ms = math.min(cap, base * 2 ^ (failures - 1)) * (1 - jitter * u)
        end
        -- As text: Redis prints a Lua number given to a command with 17 digits, which
        -- turns 1e17 and up into "1e+17", text no reader takes for a whole number.
        local at = string.format('%d', now + math.floor(retry_ms))
        redis.call('ZADD', prefix .. 'due', at, slot_id)
        redis.call('HSET', slot_key, 'status', 'scheduled', 'available_ms', at, 'a:' .. token, record)
        reply[i + 1] = R.RETRY
        retried[#retried + 1] = {slot = slot_id, attempt = s.attempt, outcome = outcome,
          available_ms = tonumber(at), error = err}
      else
        bury(prefix, slot_key, slot_id, now, token, record)
        reply[i + 1] = R.DEAD
        dead[#dead + 1] = {slot = slot_id, attempt = s.attempt, outcome = outcome, error = err}
      end
    end
  end
end

emit(prefix, maxlen, now, 'retry', retried, worker)
emit(prefix, maxlen, now, 'dead', dead, worker)
emit(prefix, maxlen, now, 'cancelled', cancelled, worker)
emit(prefix, maxlen, now, 'refused', refused, worker)
return reply
