-- The token bucket of a rate limit, shared by acquire.lua (a queue's rate) and take.lua (a
-- concurrency key's rate). Included: only the functions a script calls are inlined.

-- Take up to `want` tokens from the bucket hash (fields tokens, at_ms) refilled at `rate` per
-- second and holding at most max(1, rate / 10) (a tenth of a second's worth: a burst after
-- an idle spell is that small, so a count over any 10 s stays within a few percent of
-- 10 x rate). Returns how many were taken and, when fewer than wanted, how long (ms) until
-- the next token (-1 otherwise).
local function bucket_take(bucket, now, rate, want)
  local b = redis.call('HMGET', bucket, 'tokens', 'at_ms')
  local cap = math.max(1, rate / 10)
  local tokens = tonumber(b[1]) or cap
  local at = tonumber(b[2]) or now
  tokens = math.min(cap, tokens + math.max(0, now - at) * rate / 1000)
  local whole = math.floor(tokens)
  local grant, wait = want, -1
  if whole < grant then
    grant = whole
    wait = math.ceil((grant + 1 - tokens) * 1000 / rate)
  end
  tokens = tokens - grant
  -- Full precision: at the slowest rate (one an hour) a pass adds a few millionths of a token.
  redis.call('HSET', bucket, 'tokens', string.format('%.17g', tokens), 'at_ms',
    string.format('%d', now))
  -- An idle bucket is full again after cap / rate seconds (a tenth of a second from 10/s
  -- up; an hour at one an hour): it must live that long, or a slow rate restarts full.
  redis.call('PEXPIRE', bucket, math.max(60000, math.ceil(cap * 1000 / rate)))
  return grant, wait
end
