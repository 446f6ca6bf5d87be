"""The gateways' demand signal: per deployment, the requests they hold in flight at its engines now, and of
those the streamed ones still waiting for their first token (queued at the engine, or in its prefill).

The engines' own queue figures reach the autoscaler a health probe late. Every gateway knows at once
what it has outstanding per deployment (gateway/metering/demand.py). It publishes both counts, when
they changed, into one Redis hash per deployment — one field per gateway process, stamped with
Redis's own clock — and the autoscaler sums the fields written within FRESH_MS (`read`): a gateway
that died stops counting once its field goes stale.

The publish also tells the gateway whether to ask for a decision now: the autoscaler leaves, per
deployment, the waiting count at which its surge rule could fire (`set_nudge_level`); a publish whose
waiting sum reaches it takes a short install-wide lock (at most one ask per deployment every NUDGE_MS)
and the gateway sends `fleet.autoscale_now` — as it sends `fleet.wake` for a deployment asleep at zero.

Keys (controlplane/redis_keys.py): `sy:<install id>:demand:<deployment id>:held|nudge-at|nudge-lock`.
"""
from __future__ import annotations

import logging
import math

from django.conf import settings

from controlplane import redis_keys

log = logging.getLogger(__name__)
FRESH_MS = 5000  # a field older than this is a gateway that stopped publishing (publishers refresh every 2 s)
NUDGE_MS = 500  # at most one `fleet.autoscale_now` per deployment this often, across every gateway
NUDGE_LEVEL_TTL_MS = 30_000  # an autoscaler that stopped passing stops the nudges soon after

# A field's value: "<in flight>:<waiting for a first token>:<Redis time in ms>".
# KEYS: held hash, nudge level, nudge lock. ARGV: this gateway's field, in flight, waiting, FRESH_MS, NUDGE_MS.
# Returns {in-flight sum, waiting sum (fresh fields only), 1 if the gateway should ask for a decision now else 0}.
PUBLISH = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fresh = tonumber(ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ARGV[3] .. ':' .. now)
redis.call('PEXPIRE', KEYS[1], fresh * 4)
local held, waiting = 0, 0
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local h, w, at = string.match(fields[i + 1], '^(%d+):(%d+):(%d+)$')
  if h and now - tonumber(at) <= fresh then
    held = held + tonumber(h)
    waiting = waiting + tonumber(w)
  end
end
local level = redis.call('GET', KEYS[2])
if level and waiting >= tonumber(level) and redis.call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[5]) then
  return {held, waiting, 1}
end
return {held, waiting, 0}
"""
# KEYS: held hash. ARGV: FRESH_MS. {in-flight sum, waiting sum} of the fresh fields; stale ones are dropped.
READ = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held, waiting = 0, 0
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local h, w, at = string.match(fields[i + 1], '^(%d+):(%d+):(%d+)$')
  if h and now - tonumber(at) <= tonumber(ARGV[1]) then
    held = held + tonumber(h)
    waiting = waiting + tonumber(w)
  else
    redis.call('HDEL', KEYS[1], fields[i])
  end
end
return {held, waiting}
"""


def names(deployment_id: int, install_id: str | None = None) -> tuple[str, str, str]:
    """(held hash, nudge level, nudge lock) of a deployment of this install."""
    prefix = redis_keys.part_prefix(install_id or redis_keys.current_install_id(), redis_keys.DEMAND)
    return redis_keys.demand_names(prefix, deployment_id)


def read(deployment_id: int) -> tuple[float, float] | None:
    """(in flight, waiting for a first token) the gateways hold for the deployment now; None without a Redis."""
    if not settings.SWITCHYARD_GATEWAY_REDIS_URL:
        return None
    held, _, _ = names(deployment_id)
    try:
        in_flight, waiting = _client().eval(READ, 1, held, FRESH_MS)
        return float(in_flight), float(waiting)
    except Exception as error:  # noqa: BLE001 — no gateway signal this pass: the engines' figures still count
        log.info("demand signal: could not read deployment %s (%s)", deployment_id, error)
        return None


def set_nudge_level(deployment_id: int, level: float | None) -> None:
    """The waiting count at which gateways should ask for a decision now (None: they should not ask)."""
    if not settings.SWITCHYARD_GATEWAY_REDIS_URL:
        return
    _, key, _ = names(deployment_id)
    try:
        if level is None:
            _client().delete(key)
        else:
            _client().set(key, str(max(1, math.ceil(level))), px=NUDGE_LEVEL_TTL_MS)
    except Exception as error:  # noqa: BLE001 — the beat pass still decides
        log.info("demand signal: could not set the nudge level of deployment %s (%s)", deployment_id, error)


def _client():
    from controlplane.change_bus import gateway_redis

    return gateway_redis()
