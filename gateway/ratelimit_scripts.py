"""The Lua scripts behind `gateway.ratelimit`: each admission and settlement is one EVALSHA.

ARGV: request id, the request's worst-case tokens and cost (what admission reserves), its actual
tokens and cost (settle only; 0 otherwise), the number of checks, the number of rate checks, then
per check: code, limit, param, and for budgets the key TTL (s). The code is the kind and the
amount it charges — `1` (one request), `t` (the tokens), `c` (the cost):
  R1 Rt  GCRA rate (requests or tokens per window; param = µs per unit, ceil(window / limit))
  C1     concurrency lease (param = lease µs; the request id is the zset member)
  Bt Bc  budget reservation (param = reservation TTL µs; 2 keys: the month's hash, its zset)
  c1 bt bc  (settle script) renew a lease / reservation instead, for long streams
KEYS: the rate checks' keys first, in check order (one MGET reads them all), then the other
checks' keys in check order. A check's values depend only on the subject's limits, so the gateway
encodes them once per subject set.

Redis CPU is the budget here (every request runs both scripts), hence: one call per key where
one will do (MGET, HMGET, HSET of several fields), expiries set only when a key is created
(budgets) and globals read into locals. Times come from Redis TIME, so gateways with skewed
clocks share one timeline.
"""

_COMMON = r"""
local call, tonumber, argv, keys = redis.call, tonumber, ARGV, KEYS
local rid, tokens, cost = argv[1], tonumber(argv[2]), tonumber(argv[3])
local n, nr = tonumber(argv[6]), tonumber(argv[7])
local function int(x) return string.format('%d', x) end
local function ms(us) return math.ceil(us / 1000) + 1000 end  -- a key's TTL: a second past its last use
"""

ADMIT = _COMMON + r"""
local t = call('TIME')
local now = t[1] * 1000000 + t[2]
-- Phase 1 checks everything without counting; phase 2 counts only if all passed.
local tats = nr > 0 and call('MGET', unpack(keys, 1, nr))
local out, alt, new, reserved, fresh = {1, 0, 0}, {}, {}, {}, {}
local refused, retry = 0, 0
local rk, ok, ai = 0, nr, 8
for i = 1, n do
  local code, limit, param = argv[ai], tonumber(argv[ai + 1]), tonumber(argv[ai + 2])
  local at, wait = 2 * i + 2, nil
  if code == 'R1' or code == 'Rt' then
    rk = rk + 1
    local tat = tonumber(tats[rk]) or now
    if tat < now then tat = now end
    local units = code == 'Rt' and tokens or 1
    if units > limit then units = limit end  -- more than a window's worth passes when it is empty
    local tol = param * limit  -- burst: a full window's worth at once
    local tat_new = tat + units * param
    new[rk] = tat_new
    out[at], out[at + 1] = math.floor((tol - (tat_new - now)) / param), tat_new - now
    alt[at], alt[at + 1] = math.floor((tol - (tat - now)) / param), tat - now  -- if refused
    if tat_new - now > tol then wait = tat_new - now - tol end
    ai = ai + 3
  elseif code == 'C1' then
    ok = ok + 1
    call('ZREMRANGEBYSCORE', keys[ok], '-inf', now)  -- leases of crashed gateways lapse
    local held = call('ZCARD', keys[ok])
    if held >= limit then out[at] = 0; wait = 1000000 else out[at] = limit - held - 1 end
    out[at + 1] = 0
    ai = ai + 3
  else
    local key, rkey = keys[ok + 1], keys[ok + 2]
    ok = ok + 2
    local lapsed = call('ZRANGEBYSCORE', rkey, '-inf', now)
    if #lapsed > 0 then  -- a lost settle: give the reservation back (rare: one call per id is fine)
      for _, id in ipairs(lapsed) do
        call('HINCRBY', key, 'reserved', -tonumber(call('HGET', key, 'r:' .. id) or 0))
        call('HDEL', key, 'r:' .. id)
      end
      call('ZREMRANGEBYSCORE', rkey, '-inf', now)
    end
    local h = call('HMGET', key, 'used', 'reserved')
    fresh[i] = not h[1] and not h[2]  -- no such hash yet: it needs its TTL
    reserved[i] = tonumber(h[2]) or 0
    local free = limit - (tonumber(h[1]) or 0) - reserved[i]
    local amount = code == 'Bc' and cost or tokens
    if amount > free then out[at] = math.max(free, 0); wait = -1 else out[at] = free - amount end
    out[at + 1] = 0
    ai = ai + 4
  end
  -- The binding refusal is the one with the longest wait; -1 (a budget) outlasts any.
  if wait and (refused == 0 or (retry ~= -1 and (wait == -1 or wait > retry))) then
    refused, retry = i, wait
  end
end

if refused ~= 0 then  -- a refused request counted nothing: report the state as is
  out[1], out[2], out[3] = 0, refused, retry
  for at, v in pairs(alt) do out[at] = v end
  return out
end
local sums = {}  -- a budget key listed twice is charged twice, like HINCRBY would
rk, ok, ai = 0, nr, 8
for i = 1, n do
  local code = argv[ai]
  if code == 'R1' or code == 'Rt' then
    rk = rk + 1
    call('SET', keys[rk], int(new[rk]), 'PX', ms(new[rk] - now))
    ai = ai + 3
  elseif code == 'C1' then
    ok = ok + 1
    local param = tonumber(argv[ai + 2])
    call('ZADD', keys[ok], int(now + param), rid)
    call('PEXPIRE', keys[ok], ms(param))
    ai = ai + 3
  else
    local key, rkey = keys[ok + 1], keys[ok + 2]
    ok = ok + 2
    local amount = code == 'Bc' and cost or tokens
    sums[key] = (sums[key] or reserved[i]) + amount
    call('HSET', key, 'reserved', int(sums[key]), 'r:' .. rid, int(amount))
    -- A budget key lives a week past its month: its TTL is set once, when it is created.
    if fresh[i] then call('EXPIRE', key, argv[ai + 3]) end
    local empty = call('ZCARD', rkey) == 0  -- an empty zset is gone, and its TTL with it
    call('ZADD', rkey, int(now + tonumber(argv[ai + 2])), rid)
    if empty then call('EXPIRE', rkey, argv[ai + 3]) end
    ai = ai + 4
  end
end
return out
"""

SETTLE = _COMMON + r"""
-- Tokens per minute are charged the difference between the actual and the admitted tokens
-- (credited back when negative); budgets record the actual spend; leases are released.
-- Codes in lower case renew a lease / reservation instead (for long streams).
local actual_tokens, actual_cost = tonumber(argv[4]), tonumber(argv[5])
local now, tats, written = nil, nil, {}
local function clock()  -- TIME only when a check needs it
  if not now then local t = call('TIME'); now = t[1] * 1000000 + t[2] end
  return now
end
local rk, ok, ai = 0, nr, 8
for i = 1, n do
  local code = argv[ai]
  if code == 'R1' or code == 'Rt' then
    rk = rk + 1
    local limit, param = tonumber(argv[ai + 1]), tonumber(argv[ai + 2])
    local credit = code == 'Rt' and actual_tokens - math.min(tokens, limit) or 0
    if credit ~= 0 then
      local key = keys[rk]
      tats = tats or call('MGET', unpack(keys, 1, nr))
      local tat = written[key]  -- a key listed twice sees its first credit
      if tat == nil then tat = tonumber(tats[rk]) or false end
      clock()
      if not tat or tat < now then tat = now end
      local tat_new = tat + credit * param
      if tat_new > now then
        call('SET', key, int(tat_new), 'PX', ms(tat_new - now))
      else
        call('DEL', key)  -- fully replenished
      end
      written[key] = tat_new
    end
    ai = ai + 3
  elseif code == 'C1' or code == 'c1' then
    ok = ok + 1
    if code == 'C1' then
      call('ZREM', keys[ok], rid)
    else
      local param = tonumber(argv[ai + 2])
      call('ZADD', keys[ok], 'XX', int(clock() + param), rid)
      call('PEXPIRE', keys[ok], ms(param))
    end
    ai = ai + 3
  else
    local key, rkey = keys[ok + 1], keys[ok + 2]
    ok = ok + 2
    if code == 'Bt' or code == 'Bc' then
      local spent, field = code == 'Bc' and actual_cost or actual_tokens, 'r:' .. rid
      local h = call('HMGET', key, field, 'reserved', 'used')
      if h[1] then
        call('HSET', key, 'reserved', int((tonumber(h[2]) or 0) - tonumber(h[1])),
             'used', int((tonumber(h[3]) or 0) + spent))
        call('HDEL', key, field)
        call('ZREM', rkey, rid)
      else  -- the reservation lapsed: then only the spend is recorded
        call('HINCRBY', key, 'used', spent)
        if not h[2] and not h[3] then call('EXPIRE', key, argv[ai + 3]) end
      end
    else
      call('ZADD', rkey, 'XX', int(clock() + tonumber(argv[ai + 2])), rid)
    end
    ai = ai + 4
  end
end
return 1
"""
