"""Failed console logins are counted per username and per source IP; past the limit, refuse."""
from django.conf import settings
from django.core.cache import cache

WINDOW_SECONDS = 15 * 60


def _keys(username: str, ip: str | None) -> list[str]:
    return [f"login-fail:user:{username.lower()[:150]}", f"login-fail:ip:{ip or 'unknown'}"]


def is_locked(username: str, ip: str | None) -> bool:
    limit = settings.SWITCHYARD_LOGIN_FAILURES_PER_15_MIN
    return any((cache.get(key) or 0) >= limit for key in _keys(username, ip))


def record_failure(username: str, ip: str | None) -> None:
    for key in _keys(username, ip):
        # add() starts the window; incr() counts inside it (atomic on Redis).
        if not cache.add(key, 1, WINDOW_SECONDS):
            try:
                cache.incr(key)
            except ValueError:  # expired between add and incr
                cache.add(key, 1, WINDOW_SECONDS)


def clear(username: str, ip: str | None) -> None:
    cache.delete_many(_keys(username, ip))
