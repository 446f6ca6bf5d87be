-- Shared by ADMIT and ADMIT_TOGETHER: a budget's check, an admission's first phase (every check
-- decided, nothing counted), a budget's reservation, and the answer's nine integers.

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
-- Phase 1 of one admission, its checks' values in ARGV from `at` and its keys in KEYS after `ko`
-- (the rate checks' first): every check decided, nothing counted. `times`: the rate keys' stored
-- times (false: none), by key; without it `raws[rk]` is rate check rk's. `held`: the lease sets'
-- counts seen before in this call (nil: each check counts its set). Returns the rate checks' values, six per check in a row (one table, not
-- six: fewer allocations): the stored time, the new time, the check's number, limit, µs per unit
-- and its kind's answer slot (see answer_of); the budgets' reserved totals and freshness by check
-- number; the refusing check's number (0: none) with its wait (µs, -1: a budget); and where the
-- next admission's values and keys start.
local function decide(at, n, ko, nr, tokens, cost, now, raws, times, held)
  local rate, reserved, fresh = {}, {}, {}
  local refused, retry = 0, 0
  local rk, ok, ai = 0, ko + nr, at
  for i = 1, n do
    local code, limit, param = argv[ai], argv[ai + 1] + 0, argv[ai + 2] + 0
    local wait = nil
    if code == 'R1' or code == 'Rt' then  -- GCRA
      rk = rk + 1
      local raw
      if times then raw = times[keys[ko + rk]] else raw = raws[rk] and raws[rk] + 0 end
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
      local key = keys[ok]
      local count = held and held[key]
      if not count then count = call('ZCARD', key) end
      -- Leases of crashed gateways lapse; they only matter when the count is at the limit, so
      -- only then are they dropped (the set stays bounded: nothing is added while it is full).
      if count >= limit then count = count - call('ZREMRANGEBYSCORE', key, '-inf', now) end
      if held then held[key] = count end
      if count >= limit then wait = 1000000 end
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
  return rate, reserved, fresh, refused, retry, ai, ok
end
-- The reservation of a passed budget check (its values in ARGV from `ai`, its keys after KEYS `ok`):
-- the request's tokens or cost on top of `reserved` (what the hash held; `sums` has the running
-- total of a key listed twice, charged twice like HINCRBY would). A budget key lives a week past
-- its month (`key_ttl`): its TTL is set once, when it is created (`fresh`), and its spend starts
-- from the floor then; so is its reservations' zset's TTL (an empty zset is gone, and its TTL
-- with it).
local function reserve_budget(sums, code, ai, ok, rid, tokens, cost, reserved, fresh, now)
  local key, rkey, amount = keys[ok + 1], keys[ok + 2], code == 'Bc' and cost or tokens
  local reservation_us, key_ttl, floor = argv[ai + 2], argv[ai + 3], argv[ai + 4] + 0
  local total = (sums[key] or reserved) + amount
  sums[key] = total
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
