"""What the periodic rollup does on each run: the last few hours, any hour marked stale, their days."""
from datetime import datetime

from django.db import transaction

from usage.models import Granularity, RollupRun
from usage.periods import HOUR, floor_day, floor_hour, periods, recompute_window_start, retention_cutoff
from usage.rollups import roll_up_day, roll_up_hours

MAX_STALE_HOURS_PER_RUN = 24


def refresh_rollups(now: datetime) -> dict:
    """Recompute recent and stale hours (one transaction each), then the days they belong to."""
    hours = hours_to_recompute(now)
    events = 0
    for hour in hours:
        events += roll_up_hours(hour, hour + HOUR, now=now)
    days = sorted({floor_day(hour) for hour in hours})
    for day in days:
        roll_up_day(day, now=now)
    return {"hours": len(hours), "days": len(days), "events": events}


def hours_to_recompute(now: datetime) -> list[datetime]:
    """The recompute window plus stale hours still within retention (their raw events still exist)."""
    recent = periods(recompute_window_start(now), floor_hour(now) + HOUR, HOUR)
    stale = (RollupRun.objects.filter(granularity=Granularity.HOUR, stale=True,
                                      period_start__gte=retention_cutoff(now), period_start__lt=recent[0])
             .order_by("-period_start").values_list("period_start", flat=True)[:MAX_STALE_HOURS_PER_RUN])
    return sorted(set(recent) | set(stale))


def backfill(start: datetime, end: datetime, *, now: datetime) -> int:
    """Recompute whole days in [start, end) (day-aligned): for seeding and repairs, never past retention by itself."""
    events = 0
    for day in periods(start, end, HOUR * 24):
        with transaction.atomic():
            events += roll_up_hours(day, day + HOUR * 24, now=now)
            roll_up_day(day, now=now)
    return events
