"""The Lua scripts behind `gateway.limits.admission`: each admission and settlement is one EVALSHA.

Each script is put together at import from the files in `lua/`: `prelude.lua` (shared by all),
then `admitting.lua` (an admission's first phase: every check decided, nothing counted; a budget's
reservation; the answer) or `settling.lua` (the clock, a budget's settlement), then the script's
own walk over its checks:

  ADMIT            prelude + admitting + admit.lua
  ADMIT_TOGETHER   prelude + admitting + admit_together.lua
  SETTLE           prelude + settling + settle.lua
  SETTLE_TOGETHER  prelude + settling + settle_together.lua

A new limit kind that is a rate, a lease or a budget needs no Lua: only Python (the kind in
`plan.py`, its field in `admission.Limits`, its check in `admission.RateLimiter._checks`). A new
kind of check adds a branch to `decide` (admitting.lua) and to each script's walk. (Every local
function of a script is made anew on every call, which costs Redis about as much as a small
command: hence a few shared functions of some size rather than one per kind and phase.)

ARGV: request id, the request's worst-case tokens and cost (what admission reserves), its actual
tokens and cost (settle only; 0 otherwise), the number of checks, the number of rate checks, then
per check: code, limit, param, and for budgets the key TTL (s) and the floor (what the usage
records say the subject spent this month: a budget counts at least that, and a budget hash that
is missing — Redis lost it — starts from it). The code is the kind and the amount it charges —
`1` (one request), `t` (the tokens), `c` (the cost):
  R1 Rt  GCRA rate (requests or tokens per window; param = µs per unit, ceil(window / limit))
  C1     concurrency lease (param = lease µs; the request id is the zset member)
  Bt Bc  budget reservation (param = reservation TTL µs; 2 keys: the month's hash, its zset)
  c1 bt bc  (settle script) renew a lease / reservation instead, for long streams
KEYS: the rate checks' keys first, in check order (one MGET reads them all), then the other
checks' keys in check order. SETTLE_TOGETHER applies several settlements in one call: their
SETTLE ARGV one after the other, their KEYS likewise (`settle_soon` sends an event-loop
iteration's settles together; a lone one goes to SETTLE, which costs Redis less for one).
ADMIT_TOGETHER likewise decides several admissions in order, as one ADMIT call each would, and
answers each one's 9 integers one after the other. A check's values depend only on the
subject's limits, so the gateway encodes them once per subject set.

ADMIT answers 9 integers: admitted (1/0), the refusing check's number (1-based, 0: none), its
wait in µs (-1: a budget), then for requests (R1) and for tokens (Rt) the number of the check
with the lowest remaining share (0: no such limit), its remaining count (at least 0) and its
reset in ms — all the gateway needs for its x-ratelimit-* headers.
"""
from pathlib import Path

LUA = Path(__file__).with_name("lua")


def _script(*parts: str) -> str:
    """The files `lua/<part>.lua`, in order, as one script."""
    return "".join((LUA / f"{part}.lua").read_text(encoding="utf-8") for part in parts)


ADMIT = _script("prelude", "admitting", "admit")
ADMIT_TOGETHER = _script("prelude", "admitting", "admit_together")
SETTLE = _script("prelude", "settling", "settle")
SETTLE_TOGETHER = _script("prelude", "settling", "settle_together")
