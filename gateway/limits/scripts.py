"""The Lua scripts behind `gateway.limits.admission`: each admission and settlement is one EVALSHA.

ARGV: request id, the request's worst-case tokens and cost (what admission reserves), its actual
tokens and cost (settle only; 0 otherwise), the number of checks, the number of rate checks, then
per check: code, limit, param, and for budgets the key TTL (s) and the floor (what the usage
records say the subject spent this month: a budget counts at least that, and a budget hash that
is missing — Redis lost it — starts from it). The code is the kind and the amount it charges —
`1` (one request), `t` (the tokens), `c` (the cost):
  R1 Rt  GCRA rate (requests or tokens per window; param = µs per unit, ceil(window / limit))
  C1     concurrency lease (param = lease µs; the request id is the zset member)
  Bt Bc  budget reservation (param = reservation TTL µs; 2 keys: the month's hash, its zset)
  c1 bt bc  (settle script) renew a lease / reservation instead, for long streams
KEYS: the rate checks' keys first, in check order (one MGET reads them all), then the other
checks' keys in check order. SETTLE_TOGETHER applies several settlements in one call: their
SETTLE ARGV one after the other, their KEYS likewise (`settle_soon` sends an event-loop
iteration's settles together; a lone one goes to SETTLE, which costs Redis less for one).
ADMIT_TOGETHER likewise decides several admissions in order, as one ADMIT call each would, and
answers each one's 9 integers one after the other. A check's values depend only on the
subject's limits, so the gateway encodes them once per subject set.

Redis CPU is the budget here (every request runs both scripts), hence: one call per key where
one will do (MGET, HMGET, HSET of several fields), expiries set only when a key is created
(budgets) or when a rate key's time moves into a later second (`set_tat`), lapsed leases
dropped only from a full concurrency set, numbers read with `x + 0` (tonumber converts twice),
few tables, and globals read into locals. Times come from Redis TIME, so gateways with skewed
clocks share one timeline.

ADMIT answers 9 integers: admitted (1/0), the refusing check's number (1-based, 0: none), its
wait in µs (-1: a budget), then for requests (R1) and for tokens (Rt) the number of the check
with the lowest remaining share (0: no such limit), its remaining count (at least 0) and its
reset in ms — all the gateway needs for its x-ratelimit-* headers.
"""

_COMMON = r"""
local call, tonumber, argv, keys, floor = redis.call, tonumber, ARGV, KEYS, math.floor
local function int(x) return string.format('%d', x) end
local function ms(us) return math.ceil(us / 1000) + 1000 end  -- a key's TTL: a second past its last use
-- A rate key (GCRA's time) lives at least to the end of the second its value falls in: every
-- writer keeps that (the older scripts too: they set a second past the value). So a write whose
-- value stays within the second of the value it replaces keeps the key's TTL (no expiry to file
-- again, the common case under load); otherwise the key lives a second past its value's second.
local function set_tat(key, tat, before, now)
  local second = floor(tat / 1000000)
  if before and second <= floor(before / 1000000) then
    call('SET', key, int(tat), 'KEEPTTL')
  else
    call('SET', key, int(tat), 'PX', ms((second + 1) * 1000000 - now))
  end
end
"""

_ONE_REQUEST = r"""
-- Numbers are read with `x + 0`: the same conversion as tonumber(x), which converts twice.
local rid, tokens, cost = argv[1], argv[2] + 0, argv[3] + 0
local n, nr = argv[6] + 0, argv[7] + 0
"""

# What both admission scripts share: a budget's check and the answer's nine integers.
_ADMITTING = r"""
-- A budget check (key: the month's hash, rkey: its reservations by expiry): gives lapsed
-- reservations back (a lost settle; rare, so one call per id is fine), then whether `amount`
-- fits. What was used counts at least `floor` (the usage records' month so far: it survives a
-- Redis loss and catches lost settles). Returns: no hash yet (it needs its TTL and its floor),
-- the reserved total, and the wait (-1 or nil).
local function budget_check(key, rkey, limit, amount, now, floor)
  local lapsed = call('ZRANGEBYSCORE', rkey, '-inf', now)
  if #lapsed > 0 then
    for _, id in ipairs(lapsed) do
      call('HINCRBY', key, 'reserved', int(-(tonumber(call('HGET', key, 'r:' .. id)) or 0)))
      call('HDEL', key, 'r:' .. id)
    end
    call('ZREMRANGEBYSCORE', rkey, '-inf', now)
  end
  local h = call('HMGET', key, 'used', 'reserved')
  local reserved, used = tonumber(h[2]) or 0, tonumber(h[1]) or 0
  if used < floor then used = floor end
  return not h[1] and not h[2], reserved, amount > limit - used - reserved and -1 or nil
end
-- A passed budget check's reservation: `amount` for this request, `total` reserved in all.
-- A budget key lives a week past its month (`key_ttl`): its TTL is set once, when it is created
-- (`fresh`), and its spend starts from the floor then; so is its reservations' zset's TTL (an
-- empty zset is gone, and its TTL with it).
local function reserve_budget(key, rkey, rid, amount, total, fresh, key_ttl, reservation_us, now, floor)
  if fresh and floor > 0 then
    call('HSET', key, 'reserved', int(total), 'r:' .. rid, int(amount), 'used', int(floor))
  else
    call('HSET', key, 'reserved', int(total), 'r:' .. rid, int(amount))
  end
  if fresh then call('EXPIRE', key, key_ttl) end
  local empty = call('ZCARD', rkey) == 0
  call('ZADD', rkey, int(now + tonumber(reservation_us)), rid)
  if empty then call('EXPIRE', rkey, key_ttl) end
end
-- The answer: admitted (1/0), the refusing check's number and its wait (µs, -1: a budget),
-- then for the x-ratelimit-* headers, per kind (requests R1, tokens Rt), the check with the
-- lowest remaining share (ties: fewer remaining, then the first), its remaining (at least 0)
-- and its reset (ms). A refused request counted nothing: then they describe the state as is.
-- `rate` holds six values per rate check (see the scripts' first phase).
local function answer_of(rate, nr, refused, retry, now)
  local out, share = {refused == 0 and 1 or 0, refused, retry, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}
  for b = 0, 6 * nr - 6, 6 do
    local raw, i, limit, param, at = rate[b + 1], rate[b + 3], rate[b + 4], rate[b + 5], rate[b + 6]
    local seen = rate[b + 2]
    if refused ~= 0 then seen = raw and raw > now and raw or now end
    local reset = seen - now
    local left = floor((param * limit - reset) / param)
    local s = left / limit
    if out[at] == 0 or s < share[at] or (s == share[at] and left < out[at + 1]) then
      share[at], out[at], out[at + 1], out[at + 2] = s, i, left, reset
    end
  end
  for at = 4, 7, 3 do
    if out[at + 1] < 0 then out[at + 1] = 0 end
    out[at + 2] = math.ceil(out[at + 2] / 1000)
  end
  return out
end
"""

ADMIT = _COMMON + _ONE_REQUEST + _ADMITTING + r"""
local t = call('TIME')
local now = t[1] * 1000000 + t[2]
-- Phase 1 checks everything without counting; phase 2 counts only if all passed.
local tats = nr > 0 and call('MGET', unpack(keys, 1, nr))
-- Per rate check, six values in a row (one table, not six: fewer allocations): its stored time
-- (false: none), its new time, check number, limit, µs per unit, and its kind's answer slot.
local rate, reserved, fresh = {}, {}, {}
local refused, retry = 0, 0
local rk, ok, ai = 0, nr, 8
for i = 1, n do
  local code, limit, param = argv[ai], argv[ai + 1] + 0, argv[ai + 2] + 0
  local wait = nil
  if code == 'R1' or code == 'Rt' then
    rk = rk + 1
    local raw = tats[rk] and tats[rk] + 0
    local tat = raw or now
    if tat < now then tat = now end
    local units = code == 'Rt' and tokens or 1
    if units > limit then units = limit end  -- more than a window's worth passes when it is empty
    local tat_new = tat + units * param
    local b = 6 * rk - 6
    rate[b + 1], rate[b + 2], rate[b + 3], rate[b + 4], rate[b + 5], rate[b + 6] =
      raw or false, tat_new, i, limit, param, code == 'R1' and 4 or 7
    local over = tat_new - now - param * limit  -- burst: a full window's worth at once
    if over > 0 then wait = over end
    ai = ai + 3
  elseif code == 'C1' then
    ok = ok + 1
    local held = call('ZCARD', keys[ok])
    -- Leases of crashed gateways lapse; they only matter when the count is at the limit, so
    -- only then are they dropped (the set stays bounded: nothing is added while it is full).
    if held >= limit then held = held - call('ZREMRANGEBYSCORE', keys[ok], '-inf', now) end
    if held >= limit then wait = 1000000 end
    ai = ai + 3
  else
    fresh[i], reserved[i], wait = budget_check(keys[ok + 1], keys[ok + 2], limit,
                                               code == 'Bc' and cost or tokens, now, argv[ai + 4] + 0)
    ok = ok + 2
    ai = ai + 5
  end
  -- The binding refusal is the one with the longest wait; -1 (a budget) outlasts any.
  if wait and (refused == 0 or (retry ~= -1 and (wait == -1 or wait > retry))) then
    refused, retry = i, wait
  end
end

local out = answer_of(rate, nr, refused, retry, now)  -- the nine integers (see answer_of)
if refused ~= 0 then return out end
local sums = {}  -- a budget key listed twice is charged twice, like HINCRBY would
rk, ok, ai = 0, nr, 8
for i = 1, n do
  local code = argv[ai]
  if code == 'R1' or code == 'Rt' then
    rk = rk + 1
    set_tat(keys[rk], rate[6 * rk - 4], rate[6 * rk - 5], now)
    ai = ai + 3
  elseif code == 'C1' then
    ok = ok + 1
    local param = argv[ai + 2] + 0
    call('ZADD', keys[ok], int(now + param), rid)
    call('PEXPIRE', keys[ok], ms(param))
    ai = ai + 3
  else
    local key, rkey = keys[ok + 1], keys[ok + 2]
    ok = ok + 2
    local amount = code == 'Bc' and cost or tokens
    sums[key] = (sums[key] or reserved[i]) + amount
    reserve_budget(key, rkey, rid, amount, sums[key], fresh[i], argv[ai + 3], argv[ai + 2], now, argv[ai + 4] + 0)
    ai = ai + 5
  end
end
return out
"""

# What both settle scripts share: the clock, and a budget check's settlement.
_SETTLING = r"""
local now
local function clock()  -- TIME only when a check needs it
  if not now then local t = call('TIME'); now = t[1] * 1000000 + t[2] end
  return now
end
-- A budget check: Bt / Bc record the spend and give the reservation back (only the spend when the
-- reservation lapsed: it was given back already; on top of the floor when the hash itself is gone,
-- lost with Redis); bt / bc renew the reservation (long streams).
local function settle_budget(code, key, rkey, rid, spent, key_ttl, reservation_us, floor)
  if code == 'Bt' or code == 'Bc' then
    local field = 'r:' .. rid
    local h = call('HMGET', key, field, 'reserved', 'used')
    if h[1] then
      call('HSET', key, 'reserved', int((tonumber(h[2]) or 0) - tonumber(h[1])),
           'used', int((tonumber(h[3]) or 0) + spent))
      call('HDEL', key, field)
      call('ZREM', rkey, rid)
    elseif h[2] or h[3] then
      call('HINCRBY', key, 'used', spent)
    else
      call('HSET', key, 'used', int(floor + spent))
      call('EXPIRE', key, key_ttl)
    end
  else
    call('ZADD', rkey, 'XX', int(clock() + tonumber(reservation_us)), rid)
  end
end
"""

SETTLE = _COMMON + _ONE_REQUEST + _SETTLING + r"""
-- Tokens per minute are charged the difference between the actual and the admitted tokens
-- (credited back when negative); budgets record the actual spend; leases are released.
-- Codes in lower case renew a lease / reservation instead (for long streams).
local actual_tokens, actual_cost = argv[4] + 0, argv[5] + 0
local tats, written = nil, {}
local rk, ok, ai = 0, nr, 8
for i = 1, n do
  local code = argv[ai]
  if code == 'R1' or code == 'Rt' then
    rk = rk + 1
    local limit, param = argv[ai + 1] + 0, argv[ai + 2] + 0
    local credit = code == 'Rt' and actual_tokens - math.min(tokens, limit) or 0
    if credit ~= 0 then
      local key = keys[rk]
      tats = tats or call('MGET', unpack(keys, 1, nr))
      local before = written[key]  -- a key listed twice sees its first credit
      if before == nil then before = tats[rk] and tats[rk] + 0 end
      clock()
      local tat = before
      if not tat or tat < now then tat = now end
      local tat_new = tat + credit * param
      if tat_new > now then
        set_tat(key, tat_new, before, now)
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
    settle_budget(code, keys[ok + 1], keys[ok + 2], rid, code == 'Bc' and actual_cost or actual_tokens,
                  argv[ai + 3], argv[ai + 2], argv[ai + 4] + 0)
    ok = ok + 2
    ai = ai + 5
  end
end
return 1
"""

SETTLE_TOGETHER = _COMMON + _SETTLING + r"""
-- ARGV holds several settlements in a row, each laid out as SETTLE's; KEYS their keys in the
-- same order. They are applied in order, as if each were its own call at the same Redis time:
-- a rate key's time and a lease set's releases are written once, at the end (the gateway sends
-- a process's settles of one event-loop iteration together, usually for the same few keys).
-- Tokens per minute are charged the difference between the actual and the admitted tokens
-- (credited back when negative); budgets record the actual spend; leases are released.
-- Codes in lower case renew a lease / reservation instead (for long streams).
local stored, tats, written, released, freed = {}, {}, {}, {}, {}
local ai, ko = 1, 0
while argv[ai] do
  local rid, tokens = argv[ai], argv[ai + 1] + 0
  local actual_tokens, actual_cost = argv[ai + 3] + 0, argv[ai + 4] + 0
  local n, nr = argv[ai + 5] + 0, argv[ai + 6] + 0
  local rk, ok = ko, ko + nr
  ai = ai + 7
  for i = 1, n do
    local code = argv[ai]
    if code == 'R1' or code == 'Rt' then
      rk = rk + 1
      local limit, param = argv[ai + 1] + 0, argv[ai + 2] + 0
      local credit = code == 'Rt' and actual_tokens - math.min(tokens, limit) or 0
      if credit ~= 0 then
        local key = keys[rk]
        if stored[key] == nil then  -- this settlement's rate keys not read yet: one MGET
          local got = call('MGET', unpack(keys, ko + 1, ko + nr))
          for j = 1, nr do
            if stored[keys[ko + j]] == nil then stored[keys[ko + j]] = got[j] and got[j] + 0 end
          end
        end
        local tat = tats[key]  -- a key settled before in this call sees that settle's time
        if tat == nil then tat = stored[key] end
        clock()
        if not tat or tat < now then tat = now end
        local tat_new = tat + credit * param
        if tats[key] == nil then written[#written + 1] = key end
        tats[key] = tat_new
      end
      ai = ai + 3
    elseif code == 'C1' or code == 'c1' then
      ok = ok + 1
      local key = keys[ok]
      if code == 'C1' then
        local rids = released[key]
        if not rids then rids = {}; released[key] = rids; freed[#freed + 1] = key end
        rids[#rids + 1] = rid
      else
        local param = tonumber(argv[ai + 2])
        call('ZADD', key, 'XX', int(clock() + param), rid)
        call('PEXPIRE', key, ms(param))
      end
      ai = ai + 3
    else
      settle_budget(code, keys[ok + 1], keys[ok + 2], rid, code == 'Bc' and actual_cost or actual_tokens,
                    argv[ai + 3], argv[ai + 2], argv[ai + 4] + 0)
      ok = ok + 2
      ai = ai + 5
    end
  end
  ko = ok
end
for _, key in ipairs(written) do
  local tat = tats[key]
  if tat > now then
    set_tat(key, tat, stored[key], now)  -- the key's TTL is still the one of its stored time
  else
    call('DEL', key)  -- fully replenished
  end
end
for _, key in ipairs(freed) do call('ZREM', key, unpack(released[key])) end
return 1
"""

ADMIT_TOGETHER = _COMMON + _ADMITTING + r"""
-- ARGV holds several admissions in a row, each laid out as ADMIT's; KEYS their keys in the same
-- order. They are decided in order, as if each were its own ADMIT call at the same Redis time:
-- one sees what those before it counted (a refused one counts nothing). A rate key is read once
-- and written once, at the end; a lease set is counted once and its expiry set once, at the end;
-- budgets run as in ADMIT. The answer: each admission's 9 integers, one after the other.
local t = call('TIME')
local now = t[1] * 1000000 + t[2]
local stored, tats, written = {}, {}, {}  -- rate keys: time read, time now, keys to write
local held, leased, lease_ms = {}, {}, {}  -- lease sets: members now, sets to expire, their TTL
local answer = {}
local ai, ko = 1, 0
while argv[ai] do
  local rid, tokens, cost = argv[ai], argv[ai + 1] + 0, argv[ai + 2] + 0
  local n, nr = argv[ai + 5] + 0, argv[ai + 6] + 0
  local first = ai + 7
  local missing = nil  -- this admission's rate keys not read yet: one MGET
  for j = ko + 1, ko + nr do
    if stored[keys[j]] == nil then missing = true end
  end
  if missing then
    local got = call('MGET', unpack(keys, ko + 1, ko + nr))
    for j = 1, nr do
      local key = keys[ko + j]
      if stored[key] == nil then stored[key] = got[j] and got[j] + 0 or false; tats[key] = stored[key] end
    end
  end
  local rate, reserved, fresh = {}, {}, {}
  local refused, retry = 0, 0
  local rk, ok = 0, ko + nr
  ai = first
  for i = 1, n do
    local code, limit, param = argv[ai], argv[ai + 1] + 0, argv[ai + 2] + 0
    local wait = nil
    if code == 'R1' or code == 'Rt' then
      rk = rk + 1
      local raw = tats[keys[ko + rk]]
      local tat = raw or now
      if tat < now then tat = now end
      local units = code == 'Rt' and tokens or 1
      if units > limit then units = limit end
      local tat_new = tat + units * param
      local b = 6 * rk - 6
      rate[b + 1], rate[b + 2], rate[b + 3], rate[b + 4], rate[b + 5], rate[b + 6] =
        raw, tat_new, i, limit, param, code == 'R1' and 4 or 7
      local over = tat_new - now - param * limit
      if over > 0 then wait = over end
      ai = ai + 3
    elseif code == 'C1' then
      ok = ok + 1
      local key = keys[ok]
      local count = held[key]
      if count == nil then count = call('ZCARD', key); held[key] = count end
      if count >= limit then
        count = count - call('ZREMRANGEBYSCORE', key, '-inf', now)
        held[key] = count
      end
      if count >= limit then wait = 1000000 end
      ai = ai + 3
    else
      fresh[i], reserved[i], wait = budget_check(keys[ok + 1], keys[ok + 2], limit, code == 'Bc' and cost or tokens,
                                                 now, argv[ai + 4] + 0)
      ok = ok + 2
      ai = ai + 5
    end
    if wait and (refused == 0 or (retry ~= -1 and (wait == -1 or wait > retry))) then
      refused, retry = i, wait
    end
  end
  local base = #answer
  local out = answer_of(rate, nr, refused, retry, now)
  for j = 1, 9 do answer[base + j] = out[j] end
  if refused == 0 then
    local sums = {}
    rk, ok, ai = 0, ko + nr, first
    for i = 1, n do
      local code = argv[ai]
      if code == 'R1' or code == 'Rt' then
        rk = rk + 1
        local key = keys[ko + rk]
        if not written[key] then written[key] = true; written[#written + 1] = key end
        tats[key] = rate[6 * rk - 4]
        ai = ai + 3
      elseif code == 'C1' then
        ok = ok + 1
        local key, param = keys[ok], argv[ai + 2] + 0
        held[key] = held[key] + call('ZADD', key, int(now + param), rid)
        if not lease_ms[key] then leased[#leased + 1] = key end
        lease_ms[key] = ms(param)
        ai = ai + 3
      else
        local key, rkey = keys[ok + 1], keys[ok + 2]
        ok = ok + 2
        local amount = code == 'Bc' and cost or tokens
        sums[key] = (sums[key] or reserved[i]) + amount
        reserve_budget(key, rkey, rid, amount, sums[key], fresh[i], argv[ai + 3], argv[ai + 2], now,
                       argv[ai + 4] + 0)
        ai = ai + 5
      end
    end
  end
  ko = ok
end
for _, key in ipairs(written) do set_tat(key, tats[key], stored[key], now) end
for _, key in ipairs(leased) do call('PEXPIRE', key, lease_ms[key]) end
return answer
"""
