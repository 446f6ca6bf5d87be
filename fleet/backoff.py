"""Bounded exponential back-off between restarts, so a crashing engine cannot storm the host."""
from datetime import datetime, timedelta

from django.conf import settings


def restart_delay(restart_count: int) -> float:
    """Seconds to wait before start number `restart_count` (0 = first start, no wait)."""
    if restart_count <= 0:
        return 0.0
    base = settings.SWITCHYARD_FLEET_BACKOFF_BASE_SECONDS
    cap = settings.SWITCHYARD_FLEET_BACKOFF_MAX_SECONDS
    return float(min(cap, base * 2 ** min(restart_count - 1, 30)))


def next_restart_count(failed_restart_count: int, ready_for: timedelta | None) -> int:
    """A replacement inherits the chain unless its predecessor ran stably long enough to reset it."""
    stable = timedelta(seconds=settings.SWITCHYARD_FLEET_STABLE_SECONDS)
    if ready_for is not None and ready_for >= stable:
        return 1
    return failed_restart_count + 1


def start_not_before(failed_at: datetime, restart_count: int) -> datetime:
    """When a replacement with this restart count may start."""
    return failed_at + timedelta(seconds=restart_delay(restart_count))
