"""Every Redis key and channel of an install starts with `sy:<install id>:` — built here, and only here.

Two installs may share one Redis database (the same server, db 0, default settings). Tenant, key
and model-version ids restart at 1 in every database, so a key that names only those ids would
be the same key in both installs: rate counters, budgets and cached answers would be shared. The
install id (fleet/install.py: one random value per database, read by every process of the install)
keeps them apart. What follows the prefix says which part owns the key:

  sy:<id>:rl:…      the gateway's limits (rates, leases, budgets; gateway/limits/)
  sy:<id>:dedup:…   the gateway's de-duplication cache (gateway/pipeline/dedup.py)
  sy:<id>:fq:…      the gateway's fair queues shared across its processes (gateway/routing/shared_slots.py)
  sy:<id>:ss:…      editor sessions' latest interactive request, and each gateway worker's channel
                    for superseding (gateway/pipeline/supersede.py)
  sy:<id>:bus:…     the change bus: its sequence key and its two pub/sub channels
  sy:<id>:demand:…  the gateways' demand signal per deployment (controlplane/demand_signal.py)
  sy:<id>:cache:…   Django's cache (`CACHES` KEY_FUNCTION below)
  sy:<id>:celery:…  Celery's Redis transport (kombu's `global_keyprefix`, controlplane/celery.py)

The Lua scripts of the limits never build a key: they get every full key through KEYS.
"""
from __future__ import annotations

ROOT = "sy"
LIMITS, DEDUP, BUS, CACHE, CELERY, DEMAND = "rl", "dedup", "bus", "cache", "celery", "demand"
FAIR_QUEUE = "fq"
SUPERSEDE = "ss"
_current: str | None = None  # this process's install id, once read (it never changes for a database)


def install_prefix(install_id: str) -> str:
    """`sy:<install id>:`, the start of every key and channel of that install."""
    if not install_id or ":" in install_id:
        raise ValueError(f"not an install id: {install_id!r}")
    return f"{ROOT}:{install_id}:"


def part_prefix(install_id: str, part: str) -> str:
    """The prefix of one part's keys, e.g. `sy:<install id>:rl` (callers add `:<rest>`)."""
    return install_prefix(install_id) + part


def bus_names(install_id: str) -> tuple[str, str, str]:
    """(sequence key, changes channel, signals channel) of an install's change bus."""
    base = part_prefix(install_id, BUS)
    return f"{base}:seq", f"{base}:changes", f"{base}:signals"


def demand_names(demand_prefix: str, deployment_id: int) -> tuple[str, str, str]:
    """(held hash, nudge level, nudge lock) of one deployment under `part_prefix(<install id>, DEMAND)`."""
    base = f"{demand_prefix}:{int(deployment_id)}"
    return f"{base}:held", f"{base}:nudge-at", f"{base}:nudge-lock"


def current_install_id() -> str:
    """This install's id, read from the database once per process (sync code only)."""
    global _current
    if _current is None:
        from fleet.install import install_id

        _current = install_id()
    return _current


def forget_current() -> None:
    """Read the install id again on next use (a test that made a new database)."""
    global _current
    _current = None


def cache_key(key: str, key_prefix: str, version: int) -> str:
    """Django's cache KEY_FUNCTION: `sy:<install id>:cache:<KEY_PREFIX>:<version>:<key>`."""
    return f"{part_prefix(current_install_id(), CACHE)}:{key_prefix}:{version}:{key}"


def celery_prefix() -> str:
    """kombu's `global_keyprefix` of this install's Celery broker keys."""
    return part_prefix(current_install_id(), CELERY) + ":"
