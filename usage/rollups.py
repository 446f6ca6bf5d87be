"""Hourly and daily rollups. A period is always recomputed whole from its source (raw events for hours,
hourly rows for days) and its rows replaced in one transaction, so re-running it gives the same rows."""
from collections import defaultdict
from datetime import datetime

from django.db import transaction
from django.db.models import Sum

from models_registry.models import ModelVersion
from usage import histograms
from usage.cost.hourly import merge_shares, range_shares
from usage.models import CostRollup, Granularity, Outcome, RollupRun, UsageRollup
from usage.periods import DAY, HOUR, periods
from usage.rollup_sql import aggregate_events
from usage.work import weights

DIMENSIONS = ("tenant_id", "model_version_id", "api_key_prefix")
COUNTERS = ("requests", *Outcome.values, "prompt_tokens", "completion_tokens", "cached_tokens", "ttft_count",
            "fallbacks", "cache_hits", "feedback_accepted", "feedback_ignored")
SUMS = ("engine_work", "ttft_sum_ms", "latency_sum_ms")
HISTOGRAMS = ("ttft_histogram", "latency_histogram")
COST_DIMENSIONS = ("tenant_id", "model_version_id", "quantization", "deployment_id", "kind", "unit")


@transaction.atomic
def roll_up_hours(start: datetime, end: datetime, *, now: datetime) -> int:
    """Recompute every hour in [start, end) (hour-aligned) from raw events; returns the events counted."""
    hours = periods(start, end, HOUR)
    runs = lock_runs(Granularity.HOUR, hours)
    usage_rows = usage_rows_from_events(start, end)
    cost_rows = cost_rows_for_range(start, end, now)
    replace(Granularity.HOUR, start, end, usage_rows, cost_rows)
    counted: defaultdict[datetime, int] = defaultdict(int)
    for row in usage_rows:
        counted[row.period_start] += row.requests
    finish_runs(runs, now, counted)
    return sum(counted.values())


@transaction.atomic
def roll_up_day(day: datetime, *, now: datetime) -> None:
    """Recompute one day from its hourly rows."""
    runs = lock_runs(Granularity.DAY, [day])
    hourly = UsageRollup.objects.filter(granularity=Granularity.HOUR, period_start__gte=day, period_start__lt=day + DAY)
    usage_rows = [UsageRollup(granularity=Granularity.DAY, period_start=day, **values)
                  for values in combine(hourly.values(*DIMENSIONS, "quantization", *COUNTERS, *SUMS, *HISTOGRAMS))]
    cost_rows = daily_cost_rows(day)
    replace(Granularity.DAY, day, day + DAY, usage_rows, cost_rows)
    finish_runs(runs, now, {day: sum(row.requests for row in usage_rows)})


def lock_runs(granularity: str, starts: list[datetime]) -> list[RollupRun]:
    """Create missing run rows, then lock them in time order: concurrent recomputes of a period queue here."""
    RollupRun.objects.bulk_create([RollupRun(granularity=granularity, period_start=start) for start in starts],
                                  ignore_conflicts=True)
    return list(RollupRun.objects.select_for_update().filter(granularity=granularity, period_start__in=starts)
                .order_by("period_start"))


def finish_runs(runs: list[RollupRun], now: datetime, counted: dict) -> None:
    for run in runs:
        run.computed_at, run.stale, run.events = now, False, counted.get(run.period_start, 0)
    RollupRun.objects.bulk_update(runs, ["computed_at", "stale", "events"])


def replace(granularity: str, start: datetime, end: datetime, usage_rows: list, cost_rows: list) -> None:
    window = {"granularity": granularity, "period_start__gte": start, "period_start__lt": end}
    UsageRollup.objects.filter(**window).delete()
    CostRollup.objects.filter(**window).delete()
    UsageRollup.objects.bulk_create(usage_rows, batch_size=1000)
    CostRollup.objects.bulk_create(cost_rows, batch_size=1000)


def usage_rows_from_events(start: datetime, end: datetime, tenant_ids: list[int] | None = None) -> list[UsageRollup]:
    """One row per hour × tenant × model version × key prefix, aggregated in the database hour by hour
    (`tenant_ids`: only those tenants' rows, as `aggregate_events`)."""
    rows = [(hour, row) for hour in periods(start, end, HOUR)
            for row in aggregate_events(hour, hour + HOUR, tenant_ids)]
    quantization = quantization_of({row["model_version_id"] for _, row in rows})
    return [rollup_from_aggregate(hour, row, quantization) for hour, row in rows]


def rollup_from_aggregate(hour: datetime, row: dict, quantization: dict) -> UsageRollup:
    w_prefill, w_decode = weights()
    # Linear in the sums because cached ≤ prompt on every event (record_usage_batch clamps it).
    work = w_prefill * (row["prompt_tokens"] - row["cached_tokens"]) + w_decode * row["completion_tokens"]
    return UsageRollup(granularity=Granularity.HOUR, period_start=hour, engine_work=work,
                       quantization=quantization.get(row["model_version_id"], ""), **row)


def quantization_of(version_ids: set) -> dict:
    """Versions are immutable, so their quantization can be copied into rollups."""
    ids = [pk for pk in version_ids if pk is not None]
    return dict(ModelVersion.objects.filter(pk__in=ids).values_list("pk", "quantization")) if ids else {}


def combine(rows) -> list[dict]:
    """Sum rows sharing the same dimensions (counters, sums and histograms)."""
    merged: dict[tuple, dict] = {}
    for row in rows:
        key = tuple(row[name] for name in (*DIMENSIONS, "quantization"))
        target = merged.setdefault(key, {**dict(zip((*DIMENSIONS, "quantization"), key)),
                                         **{name: 0 for name in (*COUNTERS, *SUMS)},
                                         **{name: histograms.empty() for name in HISTOGRAMS}})
        for name in (*COUNTERS, *SUMS):
            target[name] += row[name]
        for name in HISTOGRAMS:
            target[name] = histograms.merge([target[name], row[name]])
    return list(merged.values())


def cost_rows_for_range(start: datetime, end: datetime, now: datetime) -> list[CostRollup]:
    return [CostRollup(granularity=Granularity.HOUR, period_start=hour, **dict(zip(COST_DIMENSIONS, key)), **values)
            for hour, shares in range_shares(start, end, now).items()
            for key, values in merge_shares(shares).items()]


def daily_cost_rows(day: datetime) -> list[CostRollup]:
    hourly = (CostRollup.objects.filter(granularity=Granularity.HOUR, period_start__gte=day, period_start__lt=day + DAY)
              .values(*COST_DIMENSIONS).annotate(s_gpu=Sum("gpu_seconds"), s_cost=Sum("cost_usd"),
                                                 s_work=Sum("engine_work")).order_by())
    return [CostRollup(granularity=Granularity.DAY, period_start=day, **{name: row[name] for name in COST_DIMENSIONS},
                       gpu_seconds=row["s_gpu"], cost_usd=row["s_cost"], engine_work=row["s_work"]) for row in hourly]
