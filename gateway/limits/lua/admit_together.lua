-- ADMIT_TOGETHER: several admissions in a row in ARGV, each laid out as ADMIT's; KEYS their keys
-- in the same order. They are decided in order, as if each were its own ADMIT call at the same
-- Redis time: one sees what those before it counted (a refused one counts nothing). A rate key is
-- read once and written once, at the end; a lease set is counted once and its expiry set once, at
-- the end; budgets run as in ADMIT. The answer: each admission's 9 integers, one after the other.
local t = call('TIME')
local now = t[1] * 1000000 + t[2]
local stored, tats, written = {}, {}, {}  -- rate keys: time read, time now, keys to write
local held, leased, lease_ms = {}, {}, {}  -- lease sets: members now, sets to expire, their TTL
local answer = {}
local ai, ko = 1, 0
while argv[ai] do
  local rid, tokens, cost = argv[ai], argv[ai + 1] + 0, argv[ai + 2] + 0
  local n, nr = argv[ai + 5] + 0, argv[ai + 6] + 0
  local first = ai + HEAD
  local missing = nil  -- this admission's rate keys not read yet: one MGET
  for j = ko + 1, ko + nr do
    if stored[keys[j]] == nil then missing = true end
  end
  if missing then
    local got = call('MGET', unpack(keys, ko + 1, ko + nr))
    for j = 1, nr do
      local key = keys[ko + j]
      if stored[key] == nil then stored[key] = got[j] and got[j] + 0 or false; tats[key] = stored[key] end
    end
  end
  local rate, reserved, fresh, refused, retry, next_ai, next_ko =
    decide(first, n, ko, nr, tokens, cost, now, nil, tats, held)
  local base = #answer
  local out = answer_of(rate, nr, refused, retry, now)
  for j = 1, 9 do answer[base + j] = out[j] end
  if refused == 0 then
    local sums = {}
    local rk, ok = 0, ko + nr
    ai = first
    for i = 1, n do
      local code = argv[ai]
      if code == 'R1' or code == 'Rt' then
        rk = rk + 1
        local key = keys[ko + rk]
        if not written[key] then written[key] = true; written[#written + 1] = key end
        tats[key] = rate[6 * rk - 4]
        ai = ai + 3
      elseif code == 'C1' then
        ok = ok + 1
        local key, param = keys[ok], argv[ai + 2] + 0
        held[key] = held[key] + call('ZADD', key, int(now + param), rid)
        if not lease_ms[key] then leased[#leased + 1] = key end
        lease_ms[key] = ms(param)
        ai = ai + 3
      else
        reserve_budget(sums, code, ai, ok, rid, tokens, cost, reserved[i], fresh[i], now)
        ok = ok + 2
        ai = ai + 5
      end
    end
  end
  ai, ko = next_ai, next_ko
end
for _, key in ipairs(written) do set_tat(key, tats[key], stored[key], now) end
for _, key in ipairs(leased) do call('PEXPIRE', key, lease_ms[key]) end
return answer
