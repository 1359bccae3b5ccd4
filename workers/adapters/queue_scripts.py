"""The Lua scripts of the SchedulerQueue (``redis_queue``): each runs atomically inside Redis.

``QUEUE_LUA`` holds the queue's shared functions; every script here (and any
script elsewhere that queues an entry as one step of something larger, such
as ``report_intake``) starts with it. The key layout is in ``redis_queue``.
"""

from __future__ import annotations

# The queue's Lua functions, shared by its scripts and by any script that queues an
# entry as one step of something larger: such a script passes ``RedisSchedulerQueue.keys``
# first in its KEYS (``local k = queue_keys(1)``), its own keys after them, and calls
# ``push_entry(k, ...)``.
QUEUE_LUA = r"""
-- Every key comes from KEYS, in the order of ``RedisSchedulerQueue.keys``;
-- a queue's name (ARGV) only selects among them.
local function queue_keys(first)
  local k = {
    leases = KEYS[first], tokens = KEYS[first + 1], leased_since = KEYS[first + 2],
    seq_counter = KEYS[first + 3], token_counter = KEYS[first + 4],
  }
  k.train = {
    list = KEYS[first + 5], pending = KEYS[first + 6],
    inflight = KEYS[first + 7], since = KEYS[first + 8],
  }
  k.wait = {
    list = KEYS[first + 9], pending = KEYS[first + 10],
    inflight = KEYS[first + 11], since = KEYS[first + 12],
  }
  return k
end

-- An item's entries in a pending or in-flight ZSET: members item NUL seq(20 digits) entry,
-- all scored 0, so a lex range holds one item's entries in seq order.
local function item_range(item)
  return '[' .. item .. '\0', '(' .. item .. '\1'
end

local function entry_member(item, seq, entry)
  return item .. '\0' .. string.format('%020d', seq) .. entry
end

local function entry_of(item, member)
  return string.sub(member, #item + 22)
end

local function count_entries(zset, item)
  local lo, hi = item_range(item)
  return redis.call('ZLEXCOUNT', zset, lo, hi)
end

-- Moves an item's entries from one ZSET to another; returns them (members, seq order).
local function move_entries(from, to, item)
  local lo, hi = item_range(item)
  local members = redis.call('ZRANGEBYLEX', from, lo, hi)
  for i = 1, #members, 500 do
    local args = {}
    for j = i, math.min(i + 499, #members) do
      args[#args + 1] = 0
      args[#args + 1] = members[j]
    end
    redis.call('ZADD', to, unpack(args))
  end
  if #members > 0 then redis.call('ZREMRANGEBYLEX', from, lo, hi) end
  return members
end

local function drop_entries(zset, item)
  local lo, hi = item_range(item)
  return redis.call('ZREMRANGEBYLEX', zset, lo, hi)
end

-- Done with a delivery (queue ``q``, its ``item``), if ``token`` is still its
-- delivery token: its in-flight entries and lease go. 1 if acked, else 0.
local function ack_member(k, q, item, token)
  local member = q .. ':' .. item
  if redis.call('HGET', k.tokens, member) ~= token then return 0 end
  drop_entries(k[q].inflight, item)
  redis.call('ZREM', k.leases, member)
  redis.call('HDEL', k.tokens, member)
  redis.call('HDEL', k.leased_since, member)
  return 1
end

local function return_member(k, member)
  local sep = string.find(member, ':', 1, true)
  local q = string.sub(member, 1, sep - 1)
  local item = string.sub(member, sep + 1)
  local qk = k[q]
  local since = redis.call('HGET', k.leased_since, member)
  local queued = count_entries(qk.pending, item) > 0
  -- Back to pending: seq order puts the older entries before any newer report.
  local moved = move_entries(qk.inflight, qk.pending, item)
  if queued then
    redis.call('LREM', qk.list, 1, item)
  elseif #moved == 0 then
    since = false
  end
  if since then
    redis.call('LPUSH', qk.list, item)
    redis.call('HSET', qk.since, item, since)
  end
  redis.call('ZREM', k.leases, member)
  redis.call('HDEL', k.tokens, member)
  redis.call('HDEL', k.leased_since, member)
end

local function return_expired(k, now, limit)
  local expired = redis.call('ZRANGEBYSCORE', k.leases, '-inf', now, 'LIMIT', 0, limit)
  for _, member in ipairs(expired) do return_member(k, member) end
  return #expired
end

-- 1: the entry joins the job's pending item; 0: it starts a new item;
-- -1 / -2: refused, the item / the queue is at its bound. Returns status, seq.
-- ``reply`` (optional): the key its sender waits on for the answer, as JSON text.
local function push_entry(k, q, item, data, now, maxlen, reply)
  local qk = k[q]
  local queued = count_entries(qk.pending, item)
  local status = 0
  if queued > 0 then
    if queued >= maxlen then return -1, 0 end
    status = 1
  elseif redis.call('LLEN', qk.list) >= maxlen then
    return -2, 0
  end
  local seq = redis.call('INCR', k.seq_counter)
  local entry = '{"seq":' .. seq .. ',"at":' .. now .. ',"data":' .. data
  if reply and reply ~= '' then entry = entry .. ',"reply":' .. reply end
  entry = entry .. '}'
  redis.call('ZADD', qk.pending, 0, entry_member(item, seq, entry))
  if status == 0 then
    redis.call('RPUSH', qk.list, item)
    redis.call('HSET', qk.since, item, now)
  end
  return status, seq
end
"""

# KEYS: the queue's keys, then optionally a wake-up flag.
# ARGV: queue, item, data, now, max length, flag TTL (ms).
PUSH = (
    QUEUE_LUA
    + r"""
local k = queue_keys(1)
local status, seq = push_entry(k, ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]))
if status < 0 then return {status, 0, 0} end
-- Optional wake-up flag: set if absent; 1 means this push must wake a consumer.
local woke = 0
if KEYS[14] then
  if redis.call('SET', KEYS[14], '1', 'NX', 'PX', ARGV[6]) then woke = 1 end
end
return {status, seq, woke}
"""
)

# KEYS: the queue's keys. ARGV: now, lease, scan, count, queue names in order.
POP = (
    QUEUE_LUA
    + r"""
local k = queue_keys(1)
local now, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local scan, count = tonumber(ARGV[3]), tonumber(ARGV[4])
return_expired(k, now, 1000)
local out = {}
local popped = 0
for i = 5, #ARGV do
  local q = ARGV[i]
  local qk = k[q]
  -- From the head in small chunks; items of jobs in flight stay (and are skipped).
  local skipped, scanned = 0, 0
  while popped < count and scanned < scan do
    local items = redis.call('LRANGE', qk.list, skipped, skipped + 15)
    if #items == 0 then break end
    for _, item in ipairs(items) do
      scanned = scanned + 1
      local member = q .. ':' .. item
      if redis.call('ZSCORE', k.leases, member) then
        skipped = skipped + 1
      else
        redis.call('LREM', qk.list, 1, item)
        local entries = move_entries(qk.pending, qk.inflight, item)
        local since = redis.call('HGET', qk.since, item)
        redis.call('HDEL', qk.since, item)
        local token = redis.call('INCR', k.token_counter)
        redis.call('ZADD', k.leases, now + lease, member)
        redis.call('HSET', k.tokens, member, token)
        redis.call('HSET', k.leased_since, member, since)
        table.insert(out, q)
        table.insert(out, item)
        table.insert(out, tostring(token))
        table.insert(out, since)
        table.insert(out, tostring(#entries))
        for _, entry in ipairs(entries) do table.insert(out, entry_of(item, entry)) end
        popped = popped + 1
        if popped >= count then break end
      end
    end
  end
end
return out
"""
)

# KEYS: the queue's keys. ARGV: queue, item, token.
ACK = (
    QUEUE_LUA
    + r"""
return ack_member(queue_keys(1), ARGV[1], ARGV[2], ARGV[3])
"""
)

# An ack with its answers, that can go in one round trip with the compare-and-set
# of the item's job (``workers.scheduling``): if ARGV[7] is '1', only if the job's
# cursor (KEYS[14]) holds what that write wrote, so an item whose job another
# writer touched stays in flight, to be redone. The answers go only with the ack.
# KEYS: the queue's keys, [the job's cursor key,] the reply keys its senders wait
# on. ARGV: queue, item, token, the cursor expected, the answer, its TTL (ms),
# conditional ('1' or '0').
ACK_IF = (
    QUEUE_LUA
    + r"""
local replies = 14
if ARGV[7] == '1' then
  if (redis.call('GET', KEYS[14]) or '') ~= ARGV[4] then return 0 end
  replies = 15
end
if ack_member(queue_keys(1), ARGV[1], ARGV[2], ARGV[3]) == 0 then return 0 end
for i = replies, #KEYS do
  redis.call('RPUSH', KEYS[i], ARGV[5])
  redis.call('PEXPIRE', KEYS[i], ARGV[6])
end
return 1
"""
)

# KEYS: the queue's keys. ARGV: queue, item, token.
NACK = (
    QUEUE_LUA
    + r"""
local k = queue_keys(1)
local member = ARGV[1] .. ':' .. ARGV[2]
if redis.call('HGET', k.tokens, member) ~= ARGV[3] then return 0 end
return_member(k, member)
return 1
"""
)

# KEYS: the queue's keys. ARGV: now, limit.
SWEEP = (
    QUEUE_LUA
    + r"""
return return_expired(queue_keys(1), tonumber(ARGV[1]), tonumber(ARGV[2]))
"""
)

# KEYS: the queue's keys. ARGV: item.
REMOVE = (
    QUEUE_LUA
    + r"""
local k = queue_keys(1)
local item = ARGV[1]
local removed = 0
for _, q in ipairs({'train', 'wait'}) do
  local qk = k[q]
  removed = removed + redis.call('LREM', qk.list, 0, item)
  drop_entries(qk.pending, item)
  drop_entries(qk.inflight, item)
  redis.call('HDEL', qk.since, item)
  local member = q .. ':' .. item
  removed = removed + redis.call('ZREM', k.leases, member)
  redis.call('HDEL', k.tokens, member)
  redis.call('HDEL', k.leased_since, member)
end
return removed
"""
)
