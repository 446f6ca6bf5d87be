"""The change bus, publishing side: every committed configuration change reaches the gateways at once.

Every configuration write appends an audit event (CONVENTIONS: services own writes and audit them),
so `audit.services.record_event` publishes each event's action on commit: one Lua call that
increments this install's change counter and publishes `<seq> <json>` on its channel, so
subscribers see numbered messages in order and notice a gap. Engine signals (queue depth, KV
usage) go on a second channel without numbers: a lost one is replaced by the next health pass.

Publishing is best effort and never fails the write that caused it: a gateway that missed a
message finds the change by its backstop poll of the version marker (docs/gateway.md).
"""
import json
import logging
import os
import threading
import time

from django.conf import settings

from controlplane.redis_keys import bus_names

log = logging.getLogger(__name__)
PUBLISH = """
local seq = redis.call('INCR', KEYS[1])
redis.call('PUBLISH', KEYS[2], seq .. ' ' .. ARGV[1])
return seq
"""
TIMEOUT_SECONDS = 1.0
# After a failure, publishing pauses this long: an unreachable Redis must not add a timeout to every write.
PAUSE_AFTER_FAILURE_SECONDS = 5.0
_local = threading.local()
_paused_until = 0.0


def channels(install_id: str) -> tuple[str, str, str]:
    """(sequence key, changes channel, signals channel) of one install: installs sharing a Redis never mix."""
    return bus_names(install_id)


def publish_change(action: str, **fields) -> int | None:
    """Publish one change now; the message's sequence number, or None when Redis could not be reached."""
    from fleet.install import install_id

    if not settings.SWITCHYARD_GATEWAY_REDIS_URL or time.monotonic() < _paused_until:
        return None  # no Redis configured: gateways (which then refuse inference) have no bus either
    seq_key, channel, _ = channels(install_id())
    try:
        return int(_client().eval(PUBLISH, 2, seq_key, channel, json.dumps({"action": action, **fields})))
    except Exception as error:  # noqa: BLE001 — any failure: the backstop poll covers the change
        log.warning("change bus: could not publish %s (%s); gateways will see it at their next poll", action, error)
        _failed()
        return None


def publish_signals(signals: dict[int, dict]) -> None:
    """Publish the engines' latest figures (instance id → waiting, running, KV usage) to every gateway."""
    from fleet.install import install_id

    if not settings.SWITCHYARD_GATEWAY_REDIS_URL or time.monotonic() < _paused_until:
        return
    _, _, channel = channels(install_id())
    try:
        _client().publish(channel, json.dumps({str(k): v for k, v in signals.items()}))
    except Exception as error:  # noqa: BLE001
        log.info("change bus: signals not published (%s)", error)
        _failed()


def gateway_redis():
    """This thread's client of the gateways' Redis (the demand signal shares it: controlplane/demand_signal.py)."""
    return _client()


def _client():
    """One client per thread and process (a forked worker must not share its parent's socket)."""
    import redis

    client = getattr(_local, "client", None)
    if client is None or getattr(_local, "pid", None) != os.getpid():
        client = redis.Redis.from_url(settings.SWITCHYARD_GATEWAY_REDIS_URL, socket_timeout=TIMEOUT_SECONDS,
                                      socket_connect_timeout=TIMEOUT_SECONDS)
        _local.client, _local.pid = client, os.getpid()
    return client


def _failed() -> None:
    global _paused_until
    _local.client = None
    _paused_until = time.monotonic() + PAUSE_AFTER_FAILURE_SECONDS
