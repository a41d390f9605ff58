--[[ stats: read one shard's gauges for `sched status` and the exporter. Read-only: it
  changes nothing, so it is not a transition and emits no event. One call per shard, all
  pipelined, is the whole per-shard cost of a scrape: O(lanes in the shard's `lanes` index),
  the lanes that hold entries or had one within the queue cleaner's idle time, never the
  queue names a namespace ever saw.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms          Redis time in ms

  Reply: {due_slots, due_backlog, oldest_due_ms, dlq_size, owner, owner_pttl_ms,
          history, queues, orphans}
     due_slots      ZCARD due: every scheduled slot (retries, delayed, cron)
     due_backlog    slots in due with score <= now: due but not yet promoted (missed fires)
     oldest_due_ms  score of the oldest entry in due, or -1 when due is empty
     dlq_size       ZCARD dlq
     owner          the shard's owner key as a string (whatever its type and format; "" when
                    absent); owner_pttl_ms its PTTL (-2 absent, -1 no expiry)
     history        {lag, pending, oldest_unread_ms} of the events stream's group "history"
                    (the snapshotter), or {-1, -1, -1} when that group does not exist
     queues         one {queue, lag, pending, oldest_ready_ms} per queue with an indexed lane
                    on this shard, over those lanes (one stream per priority, _lib.lua's lane()):
                    lag = entries not yet delivered to the group "workers" (XINFO GROUPS
                    lag; counted with a capped XRANGE when Redis cannot tell), pending = entries
                    delivered and not acked, oldest_ready_ms = id time of the oldest entry not
                    yet delivered or -1
     orphans        {recovered, last_ms, waiting} from the shard's `stats` (lua/sweep.lua):
                    slots the sweeper repaired, when it last did (-1 never), and how many it
                    left waiting for their lease at the end of its last walk
     not_run        {overlap, catchup, redefined, deleted} from the shard's `stats`: cron
                    occurrences that will not run, by reason, ever (_lib.lua's note_fires)
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local COUNT_CAP = 10000

-- {lag, pending, oldest_unread_ms} of `group` on `stream`; nil when the group is absent.
local function group_view(stream, group)
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', stream)
  if not ok then return nil end
  for _, g in ipairs(groups) do
    local f = {}
    for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
    if f['name'] == group then
      local last = f['last-delivered-id']
      local start = '(' .. last
      if last == '0-0' then start = '-' end
      local lag = f['lag']
      if type(lag) ~= 'number' then
        -- Redis cannot compute lag after an XDEL: count, up to a cap.
        lag = #redis.call('XRANGE', stream, start, '+', 'COUNT', COUNT_CAP)
      end
      local oldest = -1
      if lag > 0 then
        local first = redis.call('XRANGE', stream, start, '+', 'COUNT', 1)
        if #first > 0 then oldest = tonumber(string.match(first[1][1], '^(%d+)')) end
      end
      return {lag, f['pending'], oldest}
    end
  end
  return nil
end

local due = prefix .. 'due'
local oldest_due = -1
local head = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
if #head > 0 then oldest_due = tonumber(head[2]) end

local owner_key = prefix .. 'owner'
local owner = ''
local kind = redis.call('TYPE', owner_key)['ok']
if kind == 'string' then
  owner = redis.call('GET', owner_key)
elseif kind == 'hash' then
  owner = cjson.encode(redis.call('HGETALL', owner_key))
elseif kind ~= 'none' then
  owner = '(' .. kind .. ')'
end

local history = group_view(prefix .. 'events', 'history') or {-1, -1, -1}

local function lane_view(stream)
  local view = group_view(stream, 'workers')
  if view then return view end
  -- No group yet (no worker ever read this lane): every entry is undelivered.
  local len = redis.call('XLEN', stream)
  local oldest = -1
  if len > 0 then
    local first = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)
    oldest = tonumber(string.match(first[1][1], '^(%d+)'))
  end
  return {len, 0, oldest}
end

local queues, of_queue = {}, {}
for _, lane_name in ipairs(redis.call('ZRANGE', prefix .. 'lanes', 0, -1)) do
  local v = lane_view(prefix .. 'q:' .. lane_name)
  local queue = string.match(lane_name, '^[^:]+')  -- keys.queue_of
  local sum = of_queue[queue]
  if not sum then
    sum = {queue, 0, 0, -1}
    of_queue[queue] = sum
    queues[#queues + 1] = sum
  end
  sum[2], sum[3] = sum[2] + v[1], sum[3] + v[2]
  if v[3] >= 0 and (sum[4] < 0 or v[3] < sum[4]) then sum[4] = v[3] end
end

local o = redis.call('HMGET', prefix .. 'stats', 'orphans', 'orphans_last_ms', 'orphans_waiting')
local orphans = {tonumber(o[1]) or 0, tonumber(o[2]) or -1, tonumber(o[3]) or 0}

local nr = redis.call('HMGET', prefix .. 'stats', 'not_run:overlap', 'not_run:catchup',
  'not_run:redefined', 'not_run:deleted')
local not_run = {tonumber(nr[1]) or 0, tonumber(nr[2]) or 0, tonumber(nr[3]) or 0,
  tonumber(nr[4]) or 0}

return {redis.call('ZCARD', due), redis.call('ZCOUNT', due, '-inf', now), oldest_due,
  redis.call('ZCARD', prefix .. 'dlq'), string.sub(owner, 1, 200),
  redis.call('PTTL', owner_key), history, queues, orphans, not_run}
