-- SETTLE: one request's settlement (or, in lower case, its renewal).
local rid, tokens, _, actual_tokens, actual_cost, n, nr = request_at(1)
local tats, written = nil, {}
local rk, ok, ai = 0, nr, HEAD + 1
for i = 1, n do
  local code = argv[ai]
  if code == 'R1' or code == 'Rt' then
    rk = rk + 1
    local credit = rate_credit(code, argv[ai + 1] + 0, tokens, actual_tokens)
    if credit ~= 0 then
      local key = keys[rk]
      tats = tats or call('MGET', unpack(keys, 1, nr))
      local before = written[key]  -- a key listed twice sees its first credit
      if before == nil then before = tats[rk] and tats[rk] + 0 end
      local tat = credited(before, credit, argv[ai + 2] + 0)
      write_tat(key, tat, before)
      written[key] = tat
    end
    ai = ai + 3
  elseif code == 'C1' or code == 'c1' then
    ok = ok + 1
    if code == 'C1' then
      call('ZREM', keys[ok], rid)
    else
      renew_lease(keys[ok], tonumber(argv[ai + 2]), rid)
    end
    ai = ai + 3
  else
    settle_budget(code, ai, ok, rid, actual_tokens, actual_cost)
    ok = ok + 2
    ai = ai + 5
  end
end
return 1
