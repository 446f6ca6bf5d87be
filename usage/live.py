"""The hours the periodic rollup has not finished yet, read from raw events: a request counts in every
chart and table (console and /api/v1/usage) as soon as the gateway has stored its usage event — within
a second — not only after the next `usage.roll_up_recent` (every five minutes).

An hour's rollup is **final** once it was computed after the hour ended and is not stale. The
**watermark** is the first hour of the recompute window that is not final: hours before it are read
from rollups, hours from it on from raw events, each hour whole and from one source only, so nothing
is counted twice at the boundary nor left out. That is the current hour, plus the hour before until
the first rollup after the hour turned (more only while the worker is behind: at most the recompute
window). The tail's cost is allocated live by the rollup's own code (`usage.cost.hourly`).
"""
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from usage.cost.hourly import range_shares
from usage.models import Granularity, RollupRun, UsageRollup
from usage.periods import DAY, HOUR, floor_day, floor_hour, periods, recompute_window_start
from usage.rollups import usage_rows_from_events


def watermark(now: datetime) -> datetime:
    """Rollups are final before this hour; from it on, hours are read from raw events."""
    window = periods(recompute_window_start(now), floor_hour(now) + HOUR, HOUR)
    runs = {run.period_start: run for run in RollupRun.objects.filter(granularity=Granularity.HOUR,
                                                                       period_start__in=window)}
    for hour in window:
        run = runs.get(hour)
        if run is None or run.stale or run.computed_at is None or run.computed_at < hour + HOUR:
            return hour
    return floor_hour(now) + HOUR


@dataclass(frozen=True)
class Split:
    """Where each part of a read's periods comes from, as [start, end) (empty when start >= end)."""

    rolled: tuple[datetime, datetime]  # rollups of the read's granularity
    hourly: tuple[datetime, datetime]  # hourly rollups: daily reads, the watermark's day up to it
    raw: tuple[datetime, datetime]     # raw events, hour by hour, up to the current hour
    now: datetime


def split(since: datetime, until: datetime, granularity: str, now: datetime | None = None) -> Split:
    """Periods starting in [since, until), as rollups read them, cut at the watermark."""
    now = now or timezone.now()
    step = DAY if granularity == Granularity.DAY else HOUR
    first, last = _ceil(since, step), max(_ceil(until, step), _ceil(since, step))
    mark = watermark(now)
    cut = min(max(_floor(mark, step), first), last)
    raw_from = min(max(mark, cut), last)
    return Split(rolled=(first, cut), hourly=(cut, raw_from), raw=(raw_from, min(last, floor_hour(now) + HOUR)),
                 now=now)


def usage_rows(parts: Split, tenant_ids: list[int] | None) -> list[UsageRollup]:
    """The raw part's hourly rows, exactly as the rollup will write them (unsaved)."""
    start, end = parts.raw
    return usage_rows_from_events(start, end, tenant_ids) if start < end else []


def cost_shares(parts: Split) -> dict:
    """hour → the raw part's cost shares, allocated as the rollup will allocate them (up to now)."""
    start, end = parts.raw
    return range_shares(start, end, parts.now) if start < end else {}


def _floor(moment: datetime, step: timedelta) -> datetime:
    return floor_day(moment) if step == DAY else floor_hour(moment)


def _ceil(moment: datetime, step: timedelta) -> datetime:
    floored = _floor(moment, step)
    return floored if floored == moment else floored + step
