"""Rollups of a freshly seeded range, set-based on PostgreSQL: for seeding and benchmarks, not the periodic job.

`roll_up_hours` aggregates one hour per statement and replaces it under a lock, which is what live
traffic needs; a year of seeded events takes it 15–30 minutes. Here every hour of a month is one
INSERT … SELECT over the same expressions (`rollup_sql`), days are summed from those hours in SQL,
and cost goes through the regular per-hour allocation a day at a time. The rows are the ones
`roll_up_hours` / `roll_up_day` would write (tests/usage/test_seed_rollups.py compares them); the
range must have no rollups yet (a fresh seed), since nothing is deleted or locked.
"""
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from usage import histograms
from usage.models import CompletionFeedback, CostRollup, UsageEvent, UsageRollup
from usage.periods import DAY, HOUR, floor_day, periods
from usage.rollup_sql import COLUMNS, GROUP, NAMES
from usage.rollups import COUNTERS, SUMS, cost_rows_for_range, daily_cost_rows
from usage.work import weights

ROLLUPS = UsageRollup._meta.db_table
BUCKET_SQL = COLUMNS[len(NAMES):]

HOURLY_SQL = f"""
INSERT INTO {ROLLUPS} (granularity, period_start, {', '.join(GROUP)}, quantization, {', '.join(NAMES)},
                       engine_work, ttft_histogram, latency_histogram)
SELECT 'hour', a.hour, {', '.join(f'a.{name}' for name in GROUP)}, coalesce(v.quantization, ''),
       {', '.join(f'a.{name}' for name in NAMES)},
       %(w_prefill)s::float8 * (a.prompt_tokens - a.cached_tokens) + %(w_decode)s::float8 * a.completion_tokens,
       a.ttft_histogram, a.latency_histogram
FROM (
    SELECT date_trunc('hour', e.occurred_at, 'UTC') AS hour, {', '.join(f'e.{name}' for name in GROUP)},
           {', '.join(f'{sql} AS {name}' for sql, name in zip(COLUMNS, NAMES))},
           ARRAY[{', '.join(BUCKET_SQL[:histograms.BUCKETS])}]::bigint[] AS ttft_histogram,
           ARRAY[{', '.join(BUCKET_SQL[histograms.BUCKETS:])}]::bigint[] AS latency_histogram
    FROM {UsageEvent._meta.db_table} e
    LEFT JOIN {CompletionFeedback._meta.db_table} f ON f.request_id = e.request_id AND f.tenant_id = e.tenant_id
    WHERE e.occurred_at >= %(start)s AND e.occurred_at < %(end)s
    GROUP BY 1, {', '.join(f'e.{name}' for name in GROUP)}
) a
LEFT JOIN models_registry_modelversion v ON v.id = a.model_version_id
"""


def _merged(column: str) -> str:
    return "ARRAY[" + ", ".join(
        f"sum({column}[{index + 1}])" for index in range(histograms.BUCKETS)) + "]::bigint[]"


_DAILY_VALUES = (*COUNTERS, *SUMS)
DAILY_SQL = f"""
INSERT INTO {ROLLUPS} (granularity, period_start, {', '.join(GROUP)}, quantization, {', '.join(_DAILY_VALUES)},
                       ttft_histogram, latency_histogram)
SELECT 'day', date_trunc('day', period_start, 'UTC'), {', '.join(GROUP)}, quantization,
       {', '.join(f'sum({name})' for name in _DAILY_VALUES)},
       {_merged('ttft_histogram')}, {_merged('latency_histogram')}
FROM {ROLLUPS}
WHERE granularity = 'hour' AND period_start >= %(start)s AND period_start < %(end)s
GROUP BY 2, {', '.join(GROUP)}, quantization
"""

RUNS_SQL = """
INSERT INTO usage_rolluprun (granularity, period_start, computed_at, stale, events)
SELECT %(granularity)s, p, %(now)s, false,
       coalesce((SELECT sum(requests) FROM usage_usagerollup r
                 WHERE r.granularity = %(granularity)s AND r.period_start = p), 0)
FROM generate_series(%(start)s::timestamptz, %(last)s::timestamptz, %(step)s::interval) p
ON CONFLICT (granularity, period_start) DO UPDATE SET computed_at = excluded.computed_at, stale = false,
    events = excluded.events
"""


def roll_up_seeded(start: datetime, end: datetime, *, now: datetime, progress=None) -> None:
    """Hourly and daily usage and cost rollups of [start, end) (a day start to an hour start), which has none yet."""
    days = periods(start, floor_day(end - HOUR) + DAY, DAY)
    for chunk in range(0, len(days), 30):
        first, last = days[chunk], min(days[min(chunk + 30, len(days)) - 1] + DAY, end)
        with transaction.atomic():
            _usage_rows(first, last, now)
            for day in periods(first, last + DAY - HOUR, DAY):
                _cost_rows(day, min(day + DAY, last), now)
        if progress:
            progress(last)


def _usage_rows(start: datetime, end: datetime, now: datetime) -> None:
    w_prefill, w_decode = weights()
    window = {"start": start, "end": end}
    with connection.cursor() as cursor:
        cursor.execute(HOURLY_SQL, {**window, "w_prefill": w_prefill, "w_decode": w_decode})
        cursor.execute(DAILY_SQL, window)
        for granularity, first, last, step in (("hour", start, end - HOUR, HOUR),
                                               ("day", start, floor_day(end - HOUR), DAY)):
            run: dict[str, Any] = {"granularity": granularity, "now": now, "start": first, "last": last, "step": step}
            cursor.execute(RUNS_SQL, run)


def _cost_rows(day: datetime, end: datetime, now: datetime) -> None:
    CostRollup.objects.bulk_create(cost_rows_for_range(day, end, now), batch_size=2000)
    CostRollup.objects.bulk_create(daily_cost_rows(day), batch_size=2000)
