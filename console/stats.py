"""Numbers for the overview, tenant and slow-request pages: the usage selectors for ranges in hours or
days (rollups, and raw events for the hours not rolled up yet), raw usage events for the last hour
(minute buckets) and for listing individual requests."""
import math
from datetime import timezone as dt_timezone
from decimal import Decimal
from functools import cached_property

from django.db.models import Count, Q
from django.db.models.functions import Trunc

from console.timerange import TimeRange, floor
from fleet.models import Instance
from fleet.states import InstanceState
from tenants.models import Tenant
from usage import histograms, selectors
from usage.models import Granularity, Outcome, UsageEvent

SERVER_ERRORS = (Outcome.UPSTREAM_ERROR, Outcome.TIMEOUT)


def scope_filter(tenant_ids: list | None, field: str = "tenant_id") -> Q:
    """Every row for platform admins (`None`), else only the listed tenants' rows."""
    return Q() if tenant_ids is None else Q(**{f"{field}__in": tenant_ids})


def events_in(tenant_ids, tr: TimeRange):
    """The requests of a range: raw events for minute buckets, else a `RolledUp` view of the rollups."""
    events = UsageEvent.objects.filter(scope_filter(tenant_ids), occurred_at__gte=tr.start, occurred_at__lt=tr.end)
    return events if tr.unit == "minute" else RolledUp(tenant_ids, tr, events)


class RolledUp:
    """A range's requests as the usage selectors sum them up (one rollup query for the totals and the
    series, plus the hours after the rollup watermark from raw events: usage/live.py), in place of all
    its raw events: a month is ~800k events but ~900 daily or ~20k hourly rows.

    Answers `count()` and everything this module computes from events; `filter()` drills down into the
    raw events (the slow-requests list reads them by index). Percentiles come from the summed
    histograms (usage/histograms.py: interpolated inside a bucket), not from ranked raw values.
    """

    def __init__(self, tenant_ids, tr: TimeRange, raw):
        unit = "day" if tr.unit == "day" else "hour"
        self.raw = raw
        self.query = selectors.UsageQuery(tenant_ids=tenant_ids, since=floor(tr.start, unit), until=tr.end,
                                          granularity=Granularity.DAY if unit == "day" else Granularity.HOUR)

    @cached_property
    def per_period(self) -> dict:
        return selectors.usage_table(self.query, "period_start")

    @cached_property
    def totals(self) -> dict:
        names = [name for name in next(iter(self.per_period.values()), {}) if not name.endswith("_histogram")]
        totals = {name: sum(row[name] for row in self.per_period.values()) for name in names}
        for name in ("ttft_histogram", "latency_histogram"):
            totals[name] = histograms.merge(row[name] for row in self.per_period.values())
        return totals

    def count(self) -> int:
        return self.totals.get("requests", 0)

    def filter(self, *args, **kwargs):
        return self.raw.filter(*args, **kwargs)


def series(events, tr: TimeRange, value=None) -> list[tuple]:
    """(bucket start, value) for every bucket of the range, zero where nothing happened."""
    if isinstance(events, RolledUp) and value is None:
        found = {start: row["requests"] for start, row in events.per_period.items()}
    else:
        events = events.raw if isinstance(events, RolledUp) else events
        rows = (events.annotate(bucket=Trunc("occurred_at", tr.unit, tzinfo=dt_timezone.utc)).values("bucket")
                .annotate(v=value or Count("id")).order_by())
        found = {row["bucket"]: row["v"] or 0 for row in rows}
    return [(bucket, float(found.get(bucket, 0))) for bucket in tr.buckets()]


def percentile(events, field: str, q: float) -> float | None:
    """The q-quantile of `ttft_ms` or `latency_ms`: nearest rank over raw events, or from rollup histograms."""
    if isinstance(events, RolledUp):
        return histograms.percentile(events.totals.get(field.replace("_ms", "_histogram"), histograms.empty()), q)
    values = events.exclude(**{f"{field}__isnull": True})
    count = values.count()
    if not count:
        return None
    rank = max(math.ceil(q * count) - 1, 0)
    return values.order_by(field).values_list(field, flat=True)[rank]


def error_rate(events) -> float | None:
    """Share of requests that failed on our side (engine error or timeout), not client mistakes."""
    if isinstance(events, RolledUp):
        totals = events.totals
        bad = sum(totals.get(outcome, 0) for outcome in SERVER_ERRORS)
        return bad / totals["requests"] if totals.get("requests") else None
    totals = events.aggregate(total=Count("id"), bad=Count("id", filter=Q(outcome__in=SERVER_ERRORS)))
    return totals["bad"] / totals["total"] if totals["total"] else None


def cost_per_completion(tenant_ids, tr: TimeRange) -> Decimal | None:
    """Total cost (usage + idle) per completed request over the range's hours (days for day buckets): the
    definition of `total_cost_per_completion_usd`, which the usage page shows under the same label."""
    unit = "day" if tr.unit == "day" else "hour"
    query = selectors.UsageQuery(tenant_ids=tenant_ids, since=floor(tr.start, unit), until=tr.end,
                                 granularity=Granularity.DAY if unit == "day" else Granularity.HOUR)
    rows = selectors.cost_table(query, "tenant")
    completions = sum(row["completions"] for row in rows)
    if not completions:
        return None
    return sum((Decimal(row["total_cost_usd"]) for row in rows), Decimal(0)) / completions


def top_tenants(events, limit: int = 5) -> list[tuple[str, float]]:
    if isinstance(events, RolledUp):
        return _top_rolled_up(events, limit)
    rows = (events.values("tenant__slug").annotate(n=Count("id")).order_by("-n", "tenant__slug")[:limit])
    return [(row["tenant__slug"] or "(unattributed)", float(row["n"])) for row in rows]


def _top_rolled_up(events: RolledUp, limit: int) -> list[tuple[str, float]]:
    table = selectors.usage_table(events.query, "tenant_id", with_histograms=False)
    slugs = dict(Tenant.objects.filter(pk__in=[pk for pk in table if pk is not None]).values_list("pk", "slug"))
    rows = [(slugs.get(pk) or "(unattributed)", totals["requests"]) for pk, totals in table.items()
            if totals["requests"]]
    return [(slug, float(n)) for slug, n in sorted(rows, key=lambda row: (-row[1], row[0]))[:limit]]


def instances_by_state(deployments) -> list[tuple[str, float]]:
    counts = dict(Instance.objects.filter(deployment__in=deployments).values_list("state").annotate(n=Count("id")))
    return [(state.label, float(counts.get(state.value, 0))) for state in InstanceState]
