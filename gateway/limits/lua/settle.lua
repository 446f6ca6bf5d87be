-- SETTLE: one request's settlement (or, in lower case, its renewal).
local rid, tokens = argv[1], argv[2] + 0
local actual_tokens, actual_cost, n, nr = argv[4] + 0, argv[5] + 0, argv[6] + 0, argv[7] + 0
local tats, written = nil, {}
local rk, ok, ai = 0, nr, HEAD + 1
for i = 1, n do
  local code = argv[ai]
  if code == 'R1' or code == 'Rt' then
    rk = rk + 1
    local limit, param = argv[ai + 1] + 0, argv[ai + 2] + 0
    -- Tokens per minute: the actual tokens less what admission counted (at most `limit`).
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
    settle_budget(code, ai, ok, rid, actual_tokens, actual_cost)
    ok = ok + 2
    ai = ai + 5
  end
end
return 1
