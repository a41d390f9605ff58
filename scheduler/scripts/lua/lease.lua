--[[ lease: take, keep or give back a scheduler node's lease on one shard.

  The lease is the string `<prefix>owner` = "<epoch>:<node_id>" with a TTL (SET NX PX). The
  epoch (field `owner_epoch` of `<prefix>stats`) grows by one whenever the lease changes
  hands, so a node can tell its own lease from a later one of the same name.

  KEYS[1]  shard prefix, e.g. "sched:{s03}:"

  ARGV[1]  now_ms
  ARGV[2]  events_maxlen
  ARGV[3]  node_id
  ARGV[4]  ttl_ms          lease length; the node renews well before it runs out
  ARGV[5]  op              "acquire": take the lease if free, renew it if this node holds it
                           "release": give it back if this node holds it

  Reply (R, replies.py): {R.OK, epoch}    held by this node (acquire) / released (release)
                         {R.HELD, holder} not held by this node: `holder` is the current
                                          value ("" if none)

  Events: "owner" {node, epoch, op} when the lease changes hands (not on renewal).
]]
local prefix = KEYS[1]
local now = tonumber(ARGV[1])
local maxlen = ARGV[2]
local node = ARGV[3]
local ttl = tonumber(ARGV[4])
local op = ARGV[5]

--- @include "_lib.lua"

local key = prefix .. 'owner'
local current = redis.call('GET', key)
local mine = false
local epoch = 0
if current then
  local e, holder = string.match(current, '^(%d+):(.*)$')
  mine = holder == node
  epoch = tonumber(e)
end

if op == 'release' then
  if not mine then return {R.HELD, current or ''} end
  redis.call('DEL', key)
  emit(prefix, maxlen, now, 'owner', {{node = node, epoch = epoch, op = 'release'}}, node)
  return {R.OK, epoch}
end

if mine then
  redis.call('PEXPIRE', key, ttl)
  return {R.OK, epoch}
end
if current then return {R.HELD, current} end
epoch = redis.call('HINCRBY', prefix .. 'stats', 'owner_epoch', 1)
redis.call('SET', key, epoch .. ':' .. node, 'PX', ttl)
emit(prefix, maxlen, now, 'owner', {{node = node, epoch = epoch, op = 'acquire'}}, node)
return {R.OK, epoch}
