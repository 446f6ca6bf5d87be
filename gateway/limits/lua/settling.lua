-- Shared by SETTLE and SETTLE_TOGETHER: the clock, and a budget's settlement. Tokens per minute
-- are charged the difference between the actual and the admitted tokens (credited back when
-- negative); budgets record the actual spend; leases are released. Codes in lower case renew a
-- lease / reservation instead (long streams).
local now
local function clock()  -- TIME only when a check needs it
  if not now then local t = call('TIME'); now = t[1] * 1000000 + t[2] end
  return now
end
-- A budget check (its values in ARGV from `ai`, its keys after KEYS `ok`): Bt / Bc record the
-- spend and give the reservation back (only the spend when the reservation lapsed: it was given
-- back already; on top of the floor when the hash itself is gone, lost with Redis); bt / bc renew
-- the reservation (long streams).
local function settle_budget(code, ai, ok, rid, actual_tokens, actual_cost)
  local key, rkey = keys[ok + 1], keys[ok + 2]
  if code == 'Bt' or code == 'Bc' then
    local spent = code == 'Bc' and actual_cost or actual_tokens
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
      local floor, key_ttl = argv[ai + 4] + 0, argv[ai + 3]
      call('HSET', key, 'used', int(floor + spent))
      call('EXPIRE', key, key_ttl)
    end
  else
    local reservation_us = argv[ai + 2]
    call('ZADD', rkey, 'XX', int(clock() + tonumber(reservation_us)), rid)
  end
end
