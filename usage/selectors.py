"""Reads for charts and tables: rollups up to the watermark, raw events of the hours after it
(usage/live.py), so the newest requests count before the periodic rollup has run."""
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import BigIntegerField, Sum
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, TruncDay
from django.utils.dateparse import parse_datetime

from models_registry.models import ModelVersion
from tenants.models import Tenant
from usage import histograms, live
from usage.fields import element_sql
from usage.models import CostKind, CostRollup, Granularity, Outcome, PriceUnit, UsageRollup
from usage.periods import floor_day
from usage.rollups import COUNTERS, HISTOGRAMS, SUMS

BREAKDOWNS = {"tenant": "tenant_id", "model_version": "model_version_id", "quantization": "quantization",
              "key": "api_key_prefix", "day": "day"}
COST_BREAKDOWNS = ("tenant", "model_version", "quantization", "day")


@dataclass(frozen=True)
class UsageQuery:
    """What to read. `tenant_ids` None means every tenant, tenant-less rows included (platform admins)."""

    tenant_ids: list[int] | None
    since: datetime
    until: datetime
    granularity: str = Granularity.DAY
    model_version_id: int | None = None
    key: str | None = None


def _filtered(queryset, query: UsageQuery, *, by_key: bool = True):
    rows = queryset.filter(granularity=query.granularity, period_start__gte=query.since, period_start__lt=query.until)
    if query.tenant_ids is not None:
        rows = rows.filter(tenant_id__in=query.tenant_ids)
    if query.model_version_id is not None:
        rows = rows.filter(model_version_id=query.model_version_id)
    if by_key and query.key is not None:
        rows = rows.filter(api_key_prefix=query.key)
    return rows


def _grouped(rows, field: str):
    """Rows grouped by a column, or by UTC day when `field` is "day"."""
    if field == "day":
        return rows.annotate(day=TruncDay("period_start", tzinfo=timezone.utc))
    return rows


def usage_table(query: UsageQuery, field: str, *, with_histograms: bool = True) -> dict:
    """group value → counters, sums and merged histograms: rollups, then raw events from the watermark."""
    return _usage(query, field, with_histograms, live.split(query.since, query.until, query.granularity))


def _usage(query: UsageQuery, field: str, with_histograms: bool, parts: live.Split) -> dict:
    rolled, hourly = _rolled_parts(query, parts)
    table = _rolled_usage(rolled, field, with_histograms)
    for key, totals in _rolled_usage(hourly, _hourly_field(field), with_histograms).items():
        _add(table, key, totals)
    for row in live.usage_rows(parts, query.tenant_ids):
        if _matches(row, query, by_key=True):
            _add(table, _group(row, field, query.granularity), _row_totals(row, with_histograms))
    return table


def _rolled_parts(query: UsageQuery, parts: live.Split) -> tuple[UsageQuery, UsageQuery]:
    """The read's own rollups up to the cut, and hourly rollups from the cut to the watermark."""
    return (replace(query, since=parts.rolled[0], until=parts.rolled[1]),
            replace(query, granularity=Granularity.HOUR, since=parts.hourly[0], until=parts.hourly[1]))


def _hourly_field(field: str) -> str:
    """Hourly rows stand in for the watermark's day: grouped by their day where the read groups by period."""
    return "day" if field == "period_start" else field


def _rolled_usage(query: UsageQuery, field: str, with_histograms: bool) -> dict:
    """group value → totals of the rollup rows, in one aggregate query.

    Histograms are summed element by element in SQL: a year of one tenant's days, or a month of every
    tenant's hours, is thousands of rows, and decoding each row's JSON in Python cost more than the query.
    """
    if query.since >= query.until:
        return {}
    rows = _grouped(_filtered(UsageRollup.objects.all(), query), field)
    # Integer sums cast back to bigint: PostgreSQL's SUM(bigint) is numeric, which arrives as Decimal.
    sums = {f"s_{name}": _int_sum(name) for name in COUNTERS}
    sums.update({f"s_{name}": Sum(name) for name in SUMS})
    if with_histograms:
        sums.update({f"h_{name}_{index}": _int_sum(_element(name, index))
                     for name in HISTOGRAMS for index in range(histograms.BUCKETS)})
    # Run the compiled SQL on a plain cursor: Django's per-value converters cost more than the
    # aggregate itself on a month of hourly points (58 values × ~750 rows); _totals converts instead.
    try:
        sql, params = rows.values(field).annotate(**sums).order_by().query.sql_with_params()
    except EmptyResultSet:  # a filter no row can match (no readable tenant, an id past bigint): the ORM
        return {}           # would return nothing without a query, but raw SQL cannot be compiled for it
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {_group_value(field, row[0]): _totals(row[1:], with_histograms) for row in cursor.fetchall()}


def _int_sum(expression):
    return Cast(Sum(expression), BigIntegerField())


def _element(column: str, index: int):
    """One bucket of a stored histogram (an array on PostgreSQL, JSON on SQLite) as an integer."""
    sql = element_sql(UsageRollup._meta.db_table, column, index, connection.vendor)
    return RawSQL(sql, [], output_field=BigIntegerField())


def _group_value(field: str, value):
    """Times come back as text (SQLite) or naive (PostgreSQL's UTC day truncation): aware UTC datetimes here."""
    if field not in ("period_start", "day") or value is None:
        return value
    moment = parse_datetime(value) if isinstance(value, str) else value
    if moment is None:
        raise ValueError(f"not a time: {value!r}")
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _totals(values: tuple, with_histograms: bool) -> dict:
    """Column values in the order of the aggregate: counters, float sums, then histogram buckets."""
    counters, floats = len(COUNTERS), len(SUMS)
    totals: dict[str, Any] = {name: int(value or 0) for name, value in zip(COUNTERS, values)}
    totals.update({name: float(value or 0) for name, value in zip(SUMS, values[counters:])})
    if with_histograms:
        buckets = [int(value or 0) for value in values[counters + floats:]]
        totals.update({name: buckets[index * histograms.BUCKETS:(index + 1) * histograms.BUCKETS]
                       for index, name in enumerate(HISTOGRAMS)})
    return totals


def _add(table: dict, key, totals: dict) -> None:
    """Add one group's totals into a table: counters and sums added, histograms merged."""
    if key not in table:
        table[key] = totals
        return
    target = table[key]
    for name, value in totals.items():
        target[name] = histograms.merge([target[name], value]) if name in HISTOGRAMS else target[name] + value


def _row_totals(row: UsageRollup, with_histograms: bool) -> dict:
    totals = {name: getattr(row, name) for name in COUNTERS}
    totals.update({name: float(getattr(row, name)) for name in SUMS})
    if with_histograms:
        totals.update({name: list(getattr(row, name)) for name in HISTOGRAMS})
    return totals


def _matches(row, query: UsageQuery, *, by_key: bool) -> bool:
    """The filters `_filtered` applies in SQL, for a live row or cost share (tenants are already narrowed)."""
    if query.tenant_ids is not None and row.tenant_id not in query.tenant_ids:
        return False
    if query.model_version_id is not None and row.model_version_id != query.model_version_id:
        return False
    return not (by_key and query.key is not None and row.api_key_prefix != query.key)


def _group(row, field: str, granularity: str, hour=None):
    """The group value of a live row (or of a cost share of `hour`), as the rollup query would give it."""
    start = hour or row.period_start
    if field == "period_start":
        return floor_day(start) if granularity == Granularity.DAY else start
    if field == "day":
        return floor_day(start)
    return getattr(row, field)


def describe(totals: dict) -> dict:
    """What a chart or table shows for one group: counts, tokens, ratios and percentiles."""
    requests, judged = totals["requests"], totals["feedback_accepted"] + totals["feedback_ignored"]
    row = {name: totals[name] for name in COUNTERS}
    # A superseded completion is the editor's choice, not a failure (docs/supersession.md).
    errors = requests - totals[Outcome.OK] - totals[Outcome.SUPERSEDED]
    row.update(
        errors=errors,
        error_rate=_ratio(errors, requests),
        acceptance_ratio=_ratio(totals["feedback_accepted"], judged),
        latency_avg_ms=_ratio(totals["latency_sum_ms"], requests),
        ttft_avg_ms=_ratio(totals["ttft_sum_ms"], totals["ttft_count"]),
        engine_work=totals["engine_work"])
    for prefix in ("ttft", "latency"):
        for name, value in histograms.summary(totals.get(f"{prefix}_histogram", histograms.empty())).items():
            row[f"{prefix}_{name}_ms"] = value
    return row


def _ratio(part, whole):
    return round(part / whole, 6) if whole else None


def time_series(query: UsageQuery, *, latency: bool = True) -> list[dict]:
    """One point per period that has data, oldest first; `latency=False` skips the percentiles (None)."""
    table = usage_table(query, "period_start", with_histograms=latency)
    return [{"period_start": start, **describe(totals)} for start, totals in sorted(table.items())]


def breakdown(query: UsageQuery, by: str) -> list[dict]:
    """One row per tenant, model version, quantization, key prefix or day."""
    field = BREAKDOWNS[by]
    table = usage_table(query, field)
    labels = _labels(by, table.keys())
    return [{by: _label(by, value, labels), **describe(totals)} for value, totals in _ordered(table.items())]


def cost_table(query: UsageQuery, by: str) -> list[dict]:
    """Cost per tenant, model version, quantization or day, with idle capacity apart and per-unit costs."""
    field = BREAKDOWNS[by]
    parts = live.split(query.since, query.until, query.granularity)
    usage = _usage(query, field, False, parts)  # cost rows show no latency
    costs = _costs(query, field, parts)
    labels = _labels(by, set(usage) | set(costs))
    return [{by: _label(by, value, labels), **cost_row(usage.get(value), costs[value])}
            for value in _ordered_keys(set(usage) | set(costs))]


def _costs(query: UsageQuery, field: str, parts: live.Split) -> dict:
    """group value → usage cost, idle cost and seconds held per unit (GPUs, CPU cores): cost rollups, then
    live allocation from the watermark."""
    costs: defaultdict[Any, dict[str, Decimal]] = defaultdict(lambda: {
        CostKind.USAGE: Decimal(0), CostKind.IDLE: Decimal(0), CostKind.WARM: Decimal(0),
        **{unit: Decimal(0) for unit in PriceUnit.values}})
    for part, part_field in zip(_rolled_parts(query, parts), (field, _hourly_field(field))):
        if part.since >= part.until:
            continue
        rows = _grouped(_filtered(CostRollup.objects.all(), part, by_key=False), part_field)
        for row in (rows.values(part_field, "kind", "unit").annotate(cost=Sum("cost_usd"), seconds=Sum("gpu_seconds"))
                    .order_by()):
            costs[row[part_field]][row["kind"]] += row["cost"]
            costs[row[part_field]][row["unit"]] += row["seconds"]
    for hour, shares in live.cost_shares(parts).items():
        for share in (share for share in shares if _matches(share, query, by_key=False)):
            target = costs[_group(share, field, query.granularity, hour)]
            target[share.kind] += share.cost_usd
            target[share.unit] += share.gpu_seconds
    return costs


def cost_row(usage: dict | None, cost: dict) -> dict:
    """Totals and the per-unit figures: per completion, per 1k tokens, per accepted completion."""
    completions = usage[Outcome.OK] if usage else 0
    tokens = (usage["prompt_tokens"] + usage["completion_tokens"]) if usage else 0
    accepted = usage["feedback_accepted"] if usage else 0
    judged = accepted + (usage["feedback_ignored"] if usage else 0)
    used, warm = cost[CostKind.USAGE], cost[CostKind.WARM]
    idle = cost[CostKind.IDLE] + warm  # warm instances are idle capacity kept on purpose
    total = used + idle
    return {"completions": completions, "tokens": tokens, "gpu_hours": _money(cost[PriceUnit.GPU] / 3600),
            "cpu_core_hours": _money(cost[PriceUnit.CPU_CORE] / 3600),
            "usage_cost_usd": _money(used), "idle_cost_usd": _money(idle), "warm_cost_usd": _money(warm),
            "total_cost_usd": _money(total),
            "cost_per_completion_usd": _per(used, completions),
            "total_cost_per_completion_usd": _per(total, completions),
            "cost_per_1k_tokens_usd": _per(used * 1000, tokens),
            "total_cost_per_1k_tokens_usd": _per(total * 1000, tokens),
            "cost_per_accepted_completion_usd": _per(total, accepted),
            "feedback_accepted": accepted, "acceptance_ratio": _ratio(accepted, judged)}


def _money(value: Decimal) -> str:
    return str(Decimal(value).quantize(Decimal("0.000001")))


def _per(amount: Decimal, count: int) -> str | None:
    return _money(amount / count) if count else None


def _ordered(items):
    return sorted(items, key=lambda item: _sort_key(item[0]))


def _ordered_keys(keys):
    return sorted(keys, key=_sort_key)


def _sort_key(value):
    return (value is None, str(value) if not isinstance(value, int) else f"{value:020d}")


def _labels(by: str, values) -> dict:
    ids = [value for value in values if value is not None]
    if by == "tenant":
        return dict(Tenant.objects.filter(pk__in=ids).values_list("pk", "slug"))
    if by == "model_version":
        versions = ModelVersion.objects.filter(pk__in=ids).select_related("model")
        return {v.pk: f"{v.model.name}@{v.version}" for v in versions}
    return {}


def _label(by: str, value, labels: dict):
    if by == "tenant":
        return {"id": value, "slug": labels.get(value, "(unallocated)" if value is None else None)}
    if by == "model_version":
        return {"id": value, "name": labels.get(value)}
    if by == "day":
        return value.date().isoformat() if value else None
    return value
