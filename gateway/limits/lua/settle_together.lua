-- SETTLE_TOGETHER: several settlements in a row in ARGV, each laid out as SETTLE's; KEYS their
-- keys in the same order. They are applied in order, as if each were its own call at the same
-- Redis time: a rate key's time and a lease set's releases are written once, at the end (the
-- gateway sends a process's settles of one event-loop iteration together, usually for the same
-- few keys).
local stored, tats, written, released, freed = {}, {}, {}, {}, {}
local ai, ko = 1, 0
while argv[ai] do
  local rid, tokens = argv[ai], argv[ai + 1] + 0
  local actual_tokens, actual_cost = argv[ai + 3] + 0, argv[ai + 4] + 0
  local n, nr = argv[ai + 5] + 0, argv[ai + 6] + 0
  local rk, ok = ko, ko + nr
  ai = ai + HEAD
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
        if tats[key] == nil then written[#written + 1] = key end
        tats[key] = tat + credit * param
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
      settle_budget(code, ai, ok, rid, actual_tokens, actual_cost)
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
