--[[ trim_history: drop the head of a shard's events stream that every consumer group of it
  (the snapshotters' `history`, and any other reader) has read and acknowledged.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  exact           "1": trim exactly; "0": `MINID ~` (whole stream nodes only, cheap)

  The floor of a group is its oldest pending entry, or its last-delivered id when nothing is
  pending; entries below the lowest floor of all groups are removed. A stream without groups
  is left to its MAXLEN cap.

  Reply: the number of entries removed.
]]
local stream = KEYS[1] .. 'events'
local exact = ARGV[1] == '1'

if redis.call('EXISTS', stream) == 0 then return 0 end

local function parse(id)
  local a, b = string.match(id, '(%d+)-(%d+)')
  return tonumber(a), tonumber(b)
end

local function less(x, y)
  local a, b = parse(x)
  local c, d = parse(y)
  return a < c or (a == c and b < d)
end

local floor
for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local name, delivered
  for i = 1, #g, 2 do
    if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then delivered = g[i + 1] end
  end
  local low = delivered
  local pending = redis.call('XPENDING', stream, name)
  if pending[1] > 0 and less(pending[2], low) then low = pending[2] end
  if not floor or less(low, floor) then floor = low end
end
if not floor or floor == '0-0' then return 0 end
if exact then
  return redis.call('XTRIM', stream, 'MINID', floor)
end
return redis.call('XTRIM', stream, 'MINID', '~', floor)
