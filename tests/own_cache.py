"""Emptying this install's Django cache in tests without touching anything else in the Redis database.

Django's `RedisCache.clear()` is FLUSHDB: on a database shared with another install (docs/operations.md),
or with a gateway's limit counters and change bus, it would wipe their keys too. This deletes only the keys
under this install's cache prefix (`controlplane.redis_keys.cache_key`).
"""
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache

from controlplane.redis_keys import CACHE, current_install_id, part_prefix


def clear_own_cache() -> None:
    """Needs the database (the install id is read from it): call it from a test or fixture that has `db`."""
    cache = caches["default"]
    if not isinstance(cache, RedisCache):
        cache.clear()  # a process-local cache: nothing of anyone else's is in it
        return
    client = cache._cache.get_client(write=True)
    pattern = f"{part_prefix(current_install_id(), CACHE)}:*"
    batch = list(client.scan_iter(match=pattern, count=500))
    while batch:
        client.delete(*batch[:500])
        batch = batch[500:]
