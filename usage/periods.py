"""Hour and day boundaries (UTC) and the window the periodic rollup recomputes on every run."""
from datetime import datetime, timedelta, timezone

from django.conf import settings

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)


def floor_day(moment: datetime) -> datetime:
    return floor_hour(moment).replace(hour=0)


def month_start(moment: datetime) -> datetime:
    return floor_day(moment).replace(day=1)


def periods(start: datetime, end: datetime, step: timedelta) -> list[datetime]:
    """Period starts in [start, end), `start` aligned to `step`."""
    return [start + step * index for index in range(int((end - start) / step))]


def recompute_window_start(now: datetime) -> datetime:
    """The oldest hour the periodic rollup recomputes on every run."""
    return floor_hour(now) - HOUR * (settings.SWITCHYARD_USAGE_RECOMPUTE_HOURS - 1)


def retention_cutoff(now: datetime) -> datetime:
    """Raw events before this hour are pruned; their hours' rollups are final."""
    return floor_hour(now) - DAY * settings.SWITCHYARD_USAGE_RETENTION_DAYS
