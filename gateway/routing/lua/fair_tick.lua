-- Every gateway process, every tick: it is alive, how many are, and which pools share their slots now.
-- KEYS: 1 gateways (zset process -> expiry ms), then per pool this process serves: its mode key and
--       its members key (zset process -> expiry ms)
-- ARGV: process, lease ms
-- Answers: {live processes, then 1/0 per pool: its slots are shared now}
local call = redis.call
local t = call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local lease = tonumber(ARGV[2])
call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
call('ZADD', KEYS[1], now + lease, ARGV[1])
call('PEXPIRE', KEYS[1], lease * 2)
local out = {call('ZCARD', KEYS[1])}
for i = 2, #KEYS, 2 do
  call('ZREMRANGEBYSCORE', KEYS[i + 1], '-inf', now)
  call('ZADD', KEYS[i + 1], now + lease, ARGV[1])
  call('PEXPIRE', KEYS[i + 1], lease * 2)
  out[#out + 1] = call('EXISTS', KEYS[i])
end
return out
