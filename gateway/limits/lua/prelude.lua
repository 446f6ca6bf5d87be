-- Shared by every limits script: gateway/limits/scripts.py puts this file first.
-- Redis CPU is the budget here (every request runs an admit and a settle script), hence: one call
-- per key where one will do (MGET, HMGET, HSET of several fields), expiries set only when a key is
-- created (budgets) or when a rate key's time moves into a later second (`set_tat`), lapsed leases
-- dropped only from a full concurrency set, numbers read with `x + 0` (tonumber converts twice),
-- few tables, and globals read into locals. Every local function is a new closure on every call,
-- so the shared parts are a few functions of some size, not many small ones. Times come from
-- Redis TIME, so gateways with skewed clocks share one timeline.
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
-- A request's values in ARGV, from its first: its id, the tokens and cost admission reserves, the
-- actual tokens and cost (settles), the number of its checks and of its rate checks (+5, +6); its
-- checks' values follow.
local HEAD = 7
