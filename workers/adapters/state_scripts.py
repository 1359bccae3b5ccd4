"""The Lua scripts of ``state_store``: each runs atomically inside Redis."""

from __future__ import annotations

RESERVE = r"""
local key, wanted = KEYS[1], tonumber(ARGV[1])
if redis.call('EXISTS', key) == 0 then return {wanted, 0} end
local names = {'cpu_milli', 'memory_mega', 'gpu'}
local granted = wanted
for i, name in ipairs(names) do
  local need = tonumber(ARGV[i + 1])
  if need > 0 then
    local free = tonumber(redis.call('HGET', key, name) or '0')
    granted = math.min(granted, math.max(0, math.floor(free / need)))
  end
end
for i, name in ipairs(names) do
  local need = tonumber(ARGV[i + 1])
  if need > 0 and granted > 0 then redis.call('HINCRBY', key, name, -granted * need) end
end
local constrained = 0
if granted < wanted then constrained = 1 end
return {granted, constrained}
"""


COMPARE_AND_SET = r"""
local function unchanged(key, expected)
  local value = redis.call('GET', key)
  if not value then value = '' end
  return value == expected
end
if not (unchanged(KEYS[1], ARGV[1]) and unchanged(KEYS[2], ARGV[2])
        and unchanged(KEYS[3], ARGV[3])) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[4])
redis.call('SET', KEYS[2], ARGV[5])
if ARGV[6] ~= '' then redis.call('SET', KEYS[3], ARGV[6]) end
if ARGV[7] ~= '' then
  redis.call('LPUSH', KEYS[4], ARGV[7])
  redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[8]) - 1)
end
redis.call('SADD', KEYS[6], ARGV[9])
if ARGV[10] ~= '' then redis.call('SET', KEYS[5], ARGV[10]) end
-- Reports for the cluster policy: into its inbox in the same step as the cursor
-- that says they were taken, so each is handed over exactly once.
for i = 15, #ARGV do redis.call('RPUSH', KEYS[7], ARGV[i]) end
-- A new target: it waits for its scale from now (workers.adapters.pending_scales),
-- and the job's scale lock, if free, is taken for that scale (token ARGV[13]):
-- 2 says it was, so the scale need not take it (nor read what this step knows).
if ARGV[12] == '1' then
  redis.call('ZADD', KEYS[8], ARGV[11], ARGV[9])
  if ARGV[13] ~= '' and redis.call('SET', KEYS[9], ARGV[13], 'NX', 'PX', ARGV[14]) then
    return 2
  end
end
return 1
"""


# A cluster round's commit: the new policy state, and the reports it consumed
# (the inbox's first ARGV[3]) removed, only if nobody committed a round since
# this one read the state. Reports pushed meanwhile stay for the next round.
COMMIT_CLUSTER_ROUND = r"""
local value = redis.call('GET', KEYS[1])
if not value then value = '' end
if value ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
local consumed = tonumber(ARGV[3])
if consumed > 0 then redis.call('LTRIM', KEYS[2], consumed, -1) end
return 1
"""


# KEYS: per job its lock, generation counter, applied target and record. ARGV:
# the lock's TTL (ms), then per job a token. A lock already held by the job's
# token (handed over by the schedule compare-and-set) counts as taken.
BEGIN_SCALES = r"""
local out = {}
for i = 1, #KEYS, 4 do
  local token = ARGV[(i - 1) / 4 + 2]
  if redis.call('SET', KEYS[i], token, 'NX', 'PX', ARGV[1])
     or redis.call('GET', KEYS[i]) == token then
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
    table.insert(out, 1)
    table.insert(out, redis.call('GET', KEYS[i + 1]) or '')
    table.insert(out, redis.call('GET', KEYS[i + 2]) or '')
  else
    table.insert(out, 0)
    table.insert(out, '')
    table.insert(out, '')
  end
  -- The job's record (its scaler's route: a ps_url), locked or not.
  table.insert(out, redis.call('GET', KEYS[i + 3]) or '')
end
return out
"""

# Only while the lock is still ours: after a TTL expiry another worker may be
# applying a newer generation, and an older record must not overwrite it.
# KEYS: the pending-scale index, then per job its lock, applied target and
# generation counter; ARGV: per job its token, what was applied ('' for
# nothing) and the job. A job whose newest generation is applied (now or
# before: a resend that found it done) leaves the index.
FINISH_SCALES = r"""
for i = 2, #KEYS, 3 do
  local n = (i - 2) / 3
  if redis.call('GET', KEYS[i]) == ARGV[1 + 3 * n] then
    local applied = ARGV[2 + 3 * n]
    if applied ~= '' then redis.call('SET', KEYS[i + 1], applied) end
    redis.call('DEL', KEYS[i])
    local current = redis.call('GET', KEYS[i + 1])
    if current then
      local newest = tonumber(redis.call('GET', KEYS[i + 2]) or '0')
      if cjson.decode(current)['generation'] >= newest then
        redis.call('ZREM', KEYS[1], ARGV[3 + 3 * n])
      end
    end
  end
end
return 1
"""

# Lua functions shared with the report's one call (``workers.adapters.report_intake``);
# key names come in as arguments, taken from the calling script's KEYS.
HISTORY_LUA = r"""
-- The report's epoch number, as text: ``given`` (the counter keeps the highest
-- seen) or, when ``given`` is '', the job's next one.
local function number_epoch(key, given)
  local current = tonumber(redis.call('GET', key) or '0')
  if given ~= '' then
    if tonumber(given) > current then redis.call('SET', key, given) end
    return given
  end
  local numbered = string.format('%d', current + 1)
  redis.call('SET', key, numbered)
  return numbered
end

-- Into the job's bounded history. A report equal to the newest entry is not
-- added twice (a redelivered report_epoch).
local function keep_metric(key, report, keep)
  if redis.call('LINDEX', key, 0) == report then return 0 end
  redis.call('LPUSH', key, report)
  redis.call('LTRIM', key, 0, keep - 1)
  return 1
end
"""

# KEYS: metrics list. ARGV: report JSON, how many to keep (a redelivered report_epoch
# is not added twice).
APPEND_METRIC = HISTORY_LUA + "return keep_metric(KEYS[1], ARGV[1], tonumber(ARGV[2]))\n"
