-- ADMIT: one request's admission. Phase 1 checks everything without counting; phase 2 counts
-- only if all passed. Answers the nine integers of answer_of.
local rid, tokens, cost = argv[1], argv[2] + 0, argv[3] + 0
local n, nr = argv[6] + 0, argv[7] + 0
local t = call('TIME')
local now = t[1] * 1000000 + t[2]
local raws = nr > 0 and call('MGET', unpack(keys, 1, nr))
local rate, reserved, fresh, refused, retry = decide(HEAD + 1, n, 0, nr, tokens, cost, now, raws, nil, nil)
local out = answer_of(rate, nr, refused, retry, now)
if refused ~= 0 then return out end
local sums = {}
local rk, ok, ai = 0, nr, HEAD + 1
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
    reserve_budget(sums, code, ai, ok, rid, tokens, cost, reserved[i], fresh[i], now)
    ok = ok + 2
    ai = ai + 5
  end
end
return out
