"""The usage benchmark's data: N events over 365 days with a year of rollups, seeded once and kept.

A marker table (`bench_usage_seed`) records what was seeded; a later run with the same event count
reuses it and only tops up the hours since the last run (at the same rate, through the regular
rollup code), so "the last 24 hours" always has traffic. Anything else in the database is replaced.
"""
import time
from datetime import datetime

from django.db import connection
from django.utils import timezone

MARKER = "bench_usage_seed"
TENANTS, KEYS_PER_TENANT, DAYS = 5, 3, 365
USAGE_TABLES = ("usage_usageevent", "usage_usagerollup", "usage_costrollup", "usage_rolluprun",
                "usage_completionfeedback", "usage_budgetstate")


def ensure_seeded(events: int) -> str:
    """Seed (or top up) the database; a one-line account of what was done."""
    now = timezone.now()
    marker = _marker()
    if marker and marker[0] == events:
        return _top_up(marker, now)
    return _seed(events, now)


def _marker():
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {MARKER} (events bigint, start_at timestamptz, "
                       "end_at timestamptz, seed_seconds float8, seeded_at timestamptz)")
        cursor.execute(f"SELECT events, start_at, end_at, seed_seconds, seeded_at FROM {MARKER}")
        return cursor.fetchone()


def _seed(events: int, now: datetime) -> str:
    from usage import seeding
    from usage.periods import DAY, floor_day, floor_hour
    from usage.seed_rollups import roll_up_seeded

    end = floor_hour(now)
    start = floor_day(end) - DAY * DAYS
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {MARKER}, {', '.join(USAGE_TABLES)}")
    began = time.monotonic()
    pool = _pool(start, end)
    seeding.insert_events(events, pool, start, end, batch=250_000, progress=_progress("events", events, began))
    inserted = time.monotonic() - began
    print(f"  {events:,} events inserted and indexed in {inserted:.0f} s", flush=True)
    roll_up_seeded(start, end, now=now, progress=lambda upto: print(f"  rolled up to {upto:%Y-%m-%d} "
                                                                     f"({time.monotonic() - began:.0f} s)", flush=True))
    _vacuum()
    seconds = time.monotonic() - began
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {MARKER} VALUES (%s, %s, %s, %s, %s)", [events, start, end, seconds, now])
    return (f"seeded {events:,} events over {DAYS} days with their rollups in {seconds:.0f} s "
            f"(events {inserted:.0f} s, rollups and VACUUM ANALYZE {seconds - inserted:.0f} s)")


def _pool(start, end):
    from usage import seeding

    tenants, versions = seeding.seed_tenants(TENANTS), seeding.seed_versions()
    placed = seeding.seed_instances(tenants, versions, start, end)
    return seeding.targets(tenants, versions, placed, KEYS_PER_TENANT)


def _top_up(marker, now: datetime) -> str:
    """Events for the hours since the last run, at the seeded rate, rolled up the regular way."""
    from usage import seeding
    from usage.periods import HOUR, floor_day, floor_hour
    from usage.refresh import backfill

    events, start, end, seconds, seeded_at = marker
    new_end = floor_hour(now)
    reused = f"reused the seed of {seeded_at:%Y-%m-%d %H:%M} UTC ({events:,} events, seeded in {seconds:.0f} s)"
    if new_end <= end:
        return reused
    extra = round(events * (new_end - end) / (end - start))
    began = time.monotonic()
    _extend_instances(new_end)
    seeding.insert_events(extra, _pool(start, new_end), end, new_end, batch=250_000)
    backfill(floor_day(end), floor_day(new_end - HOUR) + HOUR * 24, now=now)  # whole days, replaced
    _vacuum()
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {MARKER} SET end_at = %s", [new_end])
    took = time.monotonic() - began
    return f"{reused}; topped up {extra:,} events for {(new_end - end) / HOUR:.0f} new hours in {took:.0f} s"


def _extend_instances(until: datetime) -> None:
    """The seeded (stopped) instances stay up until the new end, so the new hours have GPU cost too."""
    from fleet.models import Instance

    Instance.objects.filter(deployment__name__startswith="seed-").update(stopped_at=until)


def _vacuum() -> None:
    """Planner statistics, and a visibility map so index-only scans need not visit the heap."""
    with connection.cursor() as cursor:
        for table in USAGE_TABLES:
            cursor.execute(f"VACUUM ANALYZE {table}")


def _progress(what: str, total: int, began: float):
    step = max(total // 10, 1)

    def report(done: int) -> None:
        if done == total or done % step < 250_000:
            print(f"  {done:,}/{total:,} {what} ({time.monotonic() - began:.0f} s)", flush=True)
    return report
