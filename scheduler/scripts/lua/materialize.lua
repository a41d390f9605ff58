--[[ materialize: create the slots of one recurring job's due occurrences and advance its
  watermark (its score in the shard's `cron` set), with a compare-and-set on the old score.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  job_id
  ARGV[4]  expected_ms     the watermark the caller computed from; nothing happens unless
                           the job's score in `cron` is still exactly this
  ARGV[5]  digest          the job's `spec` field the caller computed from ("" for none),
                           the definition's version: every redefinition changes it
                           (redefine.lua); nothing happens unless it is still exactly this
  ARGV[6]  next_ms         the new watermark: the first occurrence not created by this call;
                           -1 ends the job (past end_at): it leaves the `cron` set
  ARGV[7]  missed          occurrences the catch-up policy dropped (counted, not created)
  ARGV[8]  n               number of occurrences to create; then n fire_ms values
  ARGV[9+n] k              number of the dropped occurrences listed (at most missed, the
                           most recent); then k fire_ms values. Each is written to the job's
                           fire ledger `fires:<job_id>` as "<fire_ms>:catchup" (_lib.lua's
                           note_fires); the missed - k not listed add to the job's
                           `missed_unlisted` (and all to the shard's stats `not_run:catchup`);
                           the listed ones also go out as a `not_run` event (the history
                           store's copy of the ledger)

  Each occurrence's slot `<job_id>:<fire_ms>` is created only if absent, or withdrawn by a
  redefinition (redefine.lua: cancelled, with `redefined_ms`; the new definition's occurrence
  at the same time takes its id over), as status `scheduled` in `due` at fire_ms (a past
  fire_ms is promoted at once), and indexed in the job's `runs:<job_id>` set. The slot copies the job's queue and task, and overlap="skip".
  Occurrences are computed by the caller (Python, croniter); this script only refuses work
  done from a stale watermark, so two nodes doing the same job at once create each slot once,
  or from a definition since replaced, so a node that kept the old one creates none of its
  occurrences (the caller reads the job again).

  Reply (R, replies.py):
         {R.OK, created}  watermark advanced, `created` slots new (others existed)
         {R.MOVED, 0}     refused: the watermark moved (another node did it, or a
                          redefinition), the job left the `cron` set, or its definition is
                          not the one the caller computed from; nothing was written

  Events: "materialized" {job, slots, next_ms}, and "missed" {job, missed}
  when missed > 0 (also added to the job's `missed` field and the shard's stats `missed`,
  and listed in its fire ledger as above).
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local job_id = ARGV[3]
local expected = tonumber(ARGV[4])
local digest = ARGV[5]
local next_ms = tonumber(ARGV[6])
local missed = tonumber(ARGV[7])
local n = tonumber(ARGV[8])
local k = tonumber(ARGV[9 + n]) or 0

--- @include "_lib.lua"

local cron = prefix .. 'cron'
local score = redis.call('ZSCORE', cron, job_id)
if not score or tonumber(score) ~= expected then return {R.MOVED, 0} end

local job_key = prefix .. 'job:' .. job_id
local job = redis.call('HMGET', job_key, 'queue', 'task', 'overlap', 'priority', 'spec',
  'concurrency_key')
if (job[5] or '') ~= digest then return {R.MOVED, 0} end
local runs = prefix .. 'runs:' .. job_id
local created = {}
for i = 1, n do
  local fire = ARGV[8 + i]
  local slot_id = job_id .. ':' .. fire
  local slot_key = prefix .. 'slot:' .. slot_id
  local st = redis.call('HMGET', slot_key, 'status', 'redefined_ms')
  if st[2] and st[1] == 'cancelled' then
    redis.call('DEL', slot_key)
    st[1] = nil
  end
  if not st[1] then
    redis.call('HSET', slot_key, 'job_id', job_id, 'fire_ms', fire, 'status', 'scheduled',
      'queue', job[1], 'task', job[2], 'msg', '')
    if job[3] == 'skip' then redis.call('HSET', slot_key, 'overlap', 'skip') end
    if job[4] then redis.call('HSET', slot_key, 'priority', job[4]) end
    if job[6] then redis.call('HSET', slot_key, 'concurrency_key', job[6]) end
    redis.call('ZADD', prefix .. 'due', fire, slot_id)
    redis.call('ZADD', runs, fire, slot_id)
    created[#created + 1] = slot_id
  end
end

if next_ms < 0 then
  redis.call('ZREM', cron, job_id)
else
  redis.call('ZADD', cron, ARGV[6], job_id)  -- the caller's whole-number text
end
if missed > 0 then
  redis.call('HINCRBY', job_key, 'missed', missed)
  redis.call('HINCRBY', prefix .. 'stats', 'missed', missed)
  if missed > k then
    redis.call('HINCRBY', job_key, 'missed_unlisted', missed - k)
    redis.call('HINCRBY', prefix .. 'stats', 'not_run:catchup', missed - k)
  end
  note_fires(prefix, job_id, {unpack(ARGV, 10 + n, 9 + n + k)}, 'catchup')
  emit(prefix, maxlen, now, 'not_run',
    not_run_records(job_id, 'catchup', {unpack(ARGV, 10 + n, 9 + n + k)}), nil)
  emit(prefix, maxlen, now, 'missed', {{job = job_id, missed = missed}}, nil)
end
if #created > 0 or next_ms < 0 then
  emit(prefix, maxlen, now, 'materialized', {{job = job_id, slots = created, next_ms = next_ms}}, nil)
end
return {R.OK, #created}
