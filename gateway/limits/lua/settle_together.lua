-- SETTLE_TOGETHER: several settlements in a row in ARGV, each laid out as SETTLE's; KEYS their
-- keys in the same order. They are applied in order, as if each were its own call at the same
-- Redis time: a rate key's time and a lease set's releases are written once, at the end (the
-- gateway sends a process's settles of one event-loop iteration together, usually for the same
-- few keys).
local stored, tats, written, released, freed = {}, {}, {}, {}, {}
local ai, ko = 1, 0
while argv[ai] do
  local rid, tokens, _, actual_tokens, actual_cost, n, nr = request_at(ai)
  local rk, ok = ko, ko + nr
  ai = ai + HEAD
  for i = 1, n do
    local code = argv[ai]
    if code == 'R1' or code == 'Rt' then
      rk = rk + 1
      local credit = rate_credit(code, argv[ai + 1] + 0, tokens, actual_tokens)
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
        if tats[key] == nil then written[#written + 1] = key end
        tats[key] = credited(tat, credit, argv[ai + 2] + 0)
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
        renew_lease(key, tonumber(argv[ai + 2]), rid)
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
-- A rate key's TTL is still the one of its stored time: that is the time set_tat compares with.
for _, key in ipairs(written) do write_tat(key, tats[key], stored[key]) end
for _, key in ipairs(freed) do call('ZREM', key, unpack(released[key])) end
return 1
