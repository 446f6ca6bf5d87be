-- One gateway process reports its slots and waiters of one pool and is granted free slots for
-- the tenants whose turn it is, across every gateway process (gateway/routing/shared_slots.py).
-- KEYS: 1 live (zset process -> lease expiry ms), 2 inflight (hash process -> slots held),
--       3 vt (hash tenant -> virtual time; field _v: the virtual time of the last grant),
--       4 wait (zset "tenant|process" -> expiry ms: who has waiters where), 5 mode (string, PX),
--       6 members: the live gateway processes that serve this pool (zset process -> expiry ms, kept by
--         fair_tick.lua), 7 pvt (hash "tenant|process" -> grants there: turns among one tenant's processes)
-- ARGV: process, slots it holds, capacity, a process's own share (slots it takes unasked),
--       lease ms, mode ms, slack, n, then n × (tenant, weight, waiting here)
-- Answers: {mode on (0/1), free slots left, granted per reported tenant in order ...}
local call, tonumber = redis.call, tonumber
local t = call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local proc, mine, cap, share = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local lease, mode_ms, slack, n = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
-- A process whose lease lapsed (killed, cut off) holds no slot and no waiter any more.
local dead = call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #dead > 0 then
  call('ZREM', KEYS[1], unpack(dead))
  call('HDEL', KEYS[2], unpack(dead))
end
call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
-- Tenants with waiters in other processes.
local elsewhere, names = {}, {}
for _, entry in ipairs(call('ZRANGE', KEYS[4], 0, -1)) do
  local tenant, owner = string.match(entry, '^(.-)|(.*)$')
  if owner ~= proc and not elsewhere[tenant] then
    elsewhere[tenant] = true
    names[#names + 1] = tenant
  end
end
-- Within a tenant, its processes take turns too (else the one that asks first after each release
-- would serve all of the tenant's share, and its other processes' waiters would time out).
local others_pv = {}  -- tenant -> least grant count among its other processes with waiters
local entries = call('ZRANGE', KEYS[4], 0, -1)
if #entries > 0 then
  local counts = call('HMGET', KEYS[7], unpack(entries))
  for i, entry in ipairs(entries) do
    local tenant, owner = string.match(entry, '^(.-)|(.*)$')
    local count = tonumber(counts[i] or '0')
    if owner ~= proc and (others_pv[tenant] == nil or count < others_pv[tenant]) then others_pv[tenant] = count end
  end
end
local ours, weight, want, was = {}, {}, {}, {}
for i = 0, n - 1 do
  local tenant = ARGV[9 + 3 * i]
  ours[#ours + 1] = tenant
  weight[tenant], want[tenant] = tonumber(ARGV[10 + 3 * i]), tonumber(ARGV[11 + 3 * i])
  was[tenant] = call('ZSCORE', KEYS[4], tenant .. '|' .. proc)
  if not elsewhere[tenant] then names[#names + 1] = tenant end
end
local pv = {}
if n > 0 then
  local fields = {}
  for i, tenant in ipairs(ours) do fields[i] = tenant .. '|' .. proc end
  local counts = call('HMGET', KEYS[7], unpack(fields))
  for i, tenant in ipairs(ours) do
    pv[tenant] = tonumber(counts[i] or '0')
    -- newly waiting here: level with the tenant's other processes (no credit from idle time)
    if want[tenant] > 0 and not was[tenant] and others_pv[tenant] and pv[tenant] < others_pv[tenant] then
      pv[tenant] = others_pv[tenant]
    end
  end
end
local vt = {}
local v = tonumber(call('HGET', KEYS[3], '_v') or '0')
if #names > 0 then
  local raw = call('HMGET', KEYS[3], unpack(names))
  for i, tenant in ipairs(names) do vt[tenant] = tonumber(raw[i] or '0') end
end
-- A tenant that starts waiting (here and nowhere else) starts at the current virtual time:
-- idle time is not credit to spend in a burst later.
local changed = {}
for _, tenant in ipairs(ours) do
  if want[tenant] > 0 and not was[tenant] and not elsewhere[tenant] and vt[tenant] < v then
    vt[tenant] = v
    changed[tenant] = true
  end
end
local total, over = mine, mine > share
local held, reported = call('HGETALL', KEYS[2]), {}
for i = 1, #held, 2 do
  reported[held[i]] = true
  if held[i] ~= proc then
    local count = tonumber(held[i + 1])
    total = total + count
    if count > share then over = true end
  end
end
-- A process serving this pool that has not reported yet takes its share unasked until its tick reads
-- the mode set below: count it as holding all of its share, so that the pool is never over capacity.
for _, other in ipairs(call('ZRANGEBYSCORE', KEYS[6], now, '+inf')) do
  if not reported[other] and other ~= proc then total = total + share end
end
local granted = {}
while total < cap do
  local least
  for _, tenant in ipairs(names) do
    if (elsewhere[tenant] or (want[tenant] or 0) > 0) and (least == nil or vt[tenant] < least) then least = vt[tenant] end
  end
  local best
  for _, tenant in ipairs(ours) do
    if want[tenant] > 0 and (best == nil or vt[tenant] < vt[best])
        and (others_pv[tenant] == nil or pv[tenant] <= others_pv[tenant] + slack) then
      best = tenant
    end
  end
  -- Ours only while within `slack` of the least-served waiting tenant anywhere: a slot left free
  -- here goes to that tenant when its own process asks (it does every few ms while it waits).
  if best == nil or vt[best] > least + slack then break end
  granted[best] = (granted[best] or 0) + 1
  want[best] = want[best] - 1
  if vt[best] > v then v = vt[best] end
  vt[best] = vt[best] + 1 / weight[best]
  pv[best] = pv[best] + 1
  changed[best] = true
  total, mine = total + 1, mine + 1
end
for tenant in pairs(changed) do call('HSET', KEYS[3], tenant, string.format('%.17g', vt[tenant])) end
for _, tenant in ipairs(ours) do
  if want[tenant] > 0 or was[tenant] then call('HSET', KEYS[7], tenant .. '|' .. proc, pv[tenant]) end
  if want[tenant] == 0 and not was[tenant] then call('HDEL', KEYS[7], tenant .. '|' .. proc) end
end
call('PEXPIRE', KEYS[7], 3600000)
call('HSET', KEYS[3], '_v', string.format('%.17g', v))
call('PEXPIRE', KEYS[3], 3600000)
local waiting = next(elsewhere) ~= nil
for _, tenant in ipairs(ours) do
  if want[tenant] > 0 then
    waiting = true
    call('ZADD', KEYS[4], now + lease, tenant .. '|' .. proc)
  elseif was[tenant] then
    call('ZREM', KEYS[4], tenant .. '|' .. proc)
  end
end
call('PEXPIRE', KEYS[4], lease * 2)
-- Kept at 0 too: a reporting process asks before it takes a slot (until its lease lapses).
call('ZADD', KEYS[1], now + lease, proc)
call('HSET', KEYS[2], proc, mine)
call('PEXPIRE', KEYS[1], lease * 2)
call('PEXPIRE', KEYS[2], lease * 2)
over = over or mine > share
-- Someone waits, or a process holds more than its own share: every process must ask from now on.
if waiting or over then call('SET', KEYS[5], '1', 'PX', mode_ms) end
local out = {call('EXISTS', KEYS[5]), cap - total}
for i, tenant in ipairs(ours) do out[i + 2] = granted[tenant] or 0 end
return out
