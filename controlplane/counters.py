"""Counters in Django's cache that live for a window from their first increment (atomic on Redis)."""
from django.core.cache import cache


def count_in_window(key: str, ttl: int) -> int:
    """Add one to `key`, starting a window of `ttl` seconds if there is none; the new count."""
    if cache.add(key, 1, ttl):  # add() starts the window; incr() counts inside it
        return 1
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, ttl)
        return 1
