--[[ acquire: take permits to start runs of a queue that has a queue-wide limit, and give back
  permits whose runs ended. Not a slot transition: a worker takes permits before it claims
  entries of a limited queue (scheduler/worker/limiter.py), so slots over the limit stay queued.

  KEYS[1]  the queue's permits zset, e.g. "sched:{lim:mail}:permits": member per run in
           flight anywhere, scored by when it expires (ms)
  KEYS[2]  the queue's rate bucket hash, e.g. "sched:{lim:mail}:bucket" (same hash tag, so
           one Cluster slot): fields tokens, at_ms
  KEYS[3]  the queue's limit hash, e.g. "sched:{lim:mail}:limit" (same hash tag): fields
           concurrency (most permits held at once) and rate (most starts per second, may be
           fractional), each absent for none. Read here, at each call, not passed by the
           worker: a limit set applies to the first grant after the call that set it
           returns, whatever the worker last read (scheduler/core/limits.py)

  ARGV[1]  now_ms          Redis time in ms
  ARGV[2]  want            permits asked for (0: only give back)
  ARGV[3]  ttl_ms          a permit expires this long after it is granted or renewed (the
                           workers' lease), so a crashed worker's permits come back by
                           themselves
  ARGV[4]  holder          prefix of the members granted, unique per call (the worker's id
                           and a count of its calls): member i is "<holder>:<i>"
  ARGV[5]  n               number of members to give back; then one member each

  No limit at all (the hash is gone: the limit was cleared): every permit asked for is
  granted, as without a concurrency limit. Concurrency: expired members are dropped first; then at most concurrency - held are
  granted. Rate: a token bucket refilled at `rate` per second (_bucket.lua); each permit
  granted takes a token. Without a concurrency limit, granted permits are not recorded (nothing
  would count them) and the reply's members are "".

  Reply: {granted, wait_ms, member...}: how many were granted, how long until the next token
  when the rate held the grant back (-1 otherwise), and the granted members ("" each
  without a concurrency limit).
]]
local permits, bucket = KEYS[1], KEYS[2]
local now = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local holder = ARGV[4]
local n = tonumber(ARGV[5])

--- @include "_bucket.lua"

if n > 0 then redis.call('ZREM', permits, unpack(ARGV, 6, 5 + n)) end
if want <= 0 then return {0, -1} end

local limit = redis.call('HMGET', KEYS[3], 'concurrency', 'rate')
local concurrency = tonumber(limit[1]) or -1
local rate = tonumber(limit[2]) or -1

local grant = want
if concurrency >= 0 then
  redis.call('ZREMRANGEBYSCORE', permits, '-inf', now)
  grant = math.min(grant, concurrency - redis.call('ZCARD', permits))
end

local wait = -1
if rate > 0 and grant > 0 then grant, wait = bucket_take(bucket, now, rate, grant) end

local reply = {math.max(grant, 0), wait}
if grant <= 0 then return reply end
if concurrency >= 0 then
  local expires = string.format('%d', now + ttl)
  for i = 1, grant do
    local member = holder .. ':' .. string.format('%d', i)
    redis.call('ZADD', permits, expires, member)
    reply[#reply + 1] = member
  end
else
  for i = 1, grant do reply[#reply + 1] = '' end
end
return reply
