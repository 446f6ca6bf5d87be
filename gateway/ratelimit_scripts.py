"""The Lua scripts behind `gateway.ratelimit`: each admission and settlement is one EVALSHA.

ARGV: request id, number of checks, the request's worst-case tokens and cost (what admission
reserves), its actual tokens and cost (settle only; 0 otherwise), then five values per check:
kind, limit, param, amount slot, key TTL (s). The slot names the check's amount — `1` (one
request), `t` (the tokens), `c` (the cost) — so a check's values depend only on the subject's
limits and the gateway can encode them once per subject set. Kinds:
  R  GCRA rate (requests or tokens per window; param = window µs)
  C  concurrency lease (param = lease µs; the request id is the zset member)
  B  budget reservation (param = reservation TTL µs; 2 keys)
Times come from Redis TIME, so gateways with skewed clocks share one timeline.
"""

_COMMON = r"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local rid = ARGV[1]
local amount_of = {['1'] = 1, t = tonumber(ARGV[3]), c = tonumber(ARGV[4])}
local actual_tokens, actual_cost = tonumber(ARGV[5]), tonumber(ARGV[6])
local checks, ki, ai = {}, 1, 7
for i = 1, tonumber(ARGV[2]) do
  local c = {kind = ARGV[ai], limit = tonumber(ARGV[ai + 1]), param = tonumber(ARGV[ai + 2]),
             slot = ARGV[ai + 3], amount = amount_of[ARGV[ai + 3]], ttl = tonumber(ARGV[ai + 4]),
             key = KEYS[ki]}
  ai, ki = ai + 5, ki + 1
  if c.kind == 'B' or c.kind == 'b' then c.rkey = KEYS[ki]; ki = ki + 1 end
  checks[i] = c
end
local function int(x) return string.format('%d', x) end
local function interval(c) return math.ceil(c.param / c.limit) end
local function tat_of(c)
  local tat = tonumber(redis.call('GET', c.key) or now)
  if tat < now then tat = now end
  return tat
end
"""

ADMIT = _COMMON + r"""
-- Phase 1 checks everything without counting; phase 2 counts only if all passed.
local function check_rate(c)
  local T = interval(c)
  local tol = T * c.limit  -- burst: a full window's worth at once
  local tat = tat_of(c)
  c.new = tat + math.min(c.amount, c.limit) * T
  c.left, c.until_full = math.floor((tol - (tat - now)) / T), tat - now  -- if refused
  c.remaining, c.reset = math.floor((tol - (c.new - now)) / T), c.new - now
  if c.new - now > tol then return c.new - now - tol end
  return nil
end

local function check_concurrency(c)
  redis.call('ZREMRANGEBYSCORE', c.key, '-inf', now)  -- leases of crashed gateways lapse
  local held = redis.call('ZCARD', c.key)
  c.reset = 0
  if held >= c.limit then c.remaining = 0; return 1000000 end
  c.remaining = c.limit - held - 1
  return nil
end

local function check_budget(c)
  local lapsed = redis.call('ZRANGEBYSCORE', c.rkey, '-inf', now)
  for _, id in ipairs(lapsed) do  -- a lost settle: give the reservation back
    local held = tonumber(redis.call('HGET', c.key, 'r:' .. id) or 0)
    redis.call('HINCRBY', c.key, 'reserved', -held)
    redis.call('HDEL', c.key, 'r:' .. id)
  end
  if #lapsed > 0 then redis.call('ZREMRANGEBYSCORE', c.rkey, '-inf', now) end
  local used = tonumber(redis.call('HGET', c.key, 'used') or 0)
  local free = c.limit - used - tonumber(redis.call('HGET', c.key, 'reserved') or 0)
  c.reset = 0
  if c.amount > free then c.remaining = math.max(free, 0); return -1 end
  c.remaining = free - c.amount
  return nil
end

local checkers = {R = check_rate, C = check_concurrency, B = check_budget}
local refused, retry = 0, 0
for i, c in ipairs(checks) do
  local wait = checkers[c.kind](c)
  -- The binding refusal is the one with the longest wait; -1 (a budget) outlasts any.
  if wait and (refused == 0 or (retry ~= -1 and (wait == -1 or wait > retry))) then
    refused, retry = i, wait
  end
end

if refused == 0 then
  for _, c in ipairs(checks) do
    if c.kind == 'R' then
      redis.call('SET', c.key, int(c.new), 'PX', math.ceil((c.new - now) / 1000) + 1000)
    elseif c.kind == 'C' then
      redis.call('ZADD', c.key, int(now + c.param), rid)
      redis.call('PEXPIRE', c.key, math.ceil(c.param / 1000) + 1000)
    else
      redis.call('HINCRBY', c.key, 'reserved', c.amount)
      redis.call('HSET', c.key, 'r:' .. rid, c.amount)
      redis.call('ZADD', c.rkey, int(now + c.param), rid)
      redis.call('EXPIRE', c.key, c.ttl)
      redis.call('EXPIRE', c.rkey, c.ttl)
    end
  end
end

local out = {refused == 0 and 1 or 0, refused, retry}
for _, c in ipairs(checks) do  -- a refused request counted nothing: report the state as is
  out[#out + 1] = (refused ~= 0 and c.left) or c.remaining
  out[#out + 1] = (refused ~= 0 and c.until_full) or c.reset
end
return out
"""

SETTLE = _COMMON + r"""
-- Tokens per minute are charged the difference between the actual and the admitted tokens
-- (credited back when negative); budgets record the actual spend; leases are released.
-- Kinds in lower case renew a lease / reservation instead (for long streams).
for _, c in ipairs(checks) do
  local credit = (c.kind == 'R' and c.slot == 't') and actual_tokens - math.min(c.amount, c.limit) or 0
  if credit ~= 0 then
    local new = tat_of(c) + credit * interval(c)
    if new > now then
      redis.call('SET', c.key, int(new), 'PX', math.ceil((new - now) / 1000) + 1000)
    else
      redis.call('DEL', c.key)  -- fully replenished
    end
  elseif c.kind == 'C' then
    redis.call('ZREM', c.key, rid)
  elseif c.kind == 'B' then
    local held = redis.call('HGET', c.key, 'r:' .. rid)
    if held then  -- absent when the reservation lapsed: then only the spend is recorded
      redis.call('HINCRBY', c.key, 'reserved', -tonumber(held))
      redis.call('HDEL', c.key, 'r:' .. rid)
      redis.call('ZREM', c.rkey, rid)
    end
    redis.call('HINCRBY', c.key, 'used', c.slot == 'c' and actual_cost or actual_tokens)
    redis.call('EXPIRE', c.key, c.ttl)
  elseif c.kind == 'c' then
    redis.call('ZADD', c.key, 'XX', int(now + c.param), rid)
    redis.call('PEXPIRE', c.key, math.ceil(c.param / 1000) + 1000)
  elseif c.kind == 'b' then
    redis.call('ZADD', c.rkey, 'XX', int(now + c.param), rid)
  end
end
return 1
"""
