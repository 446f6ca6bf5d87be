"""Live numbers for the overview, read from raw usage events and instances (read-only)."""
import math
from datetime import timezone as dt_timezone
from decimal import Decimal

from django.db.models import Count, Q
from django.db.models.functions import Trunc

from console.timerange import TimeRange, floor
from fleet.models import Deployment, Instance
from fleet.states import InstanceState
from usage import selectors
from usage.models import Granularity, Outcome, UsageEvent

SERVER_ERRORS = (Outcome.UPSTREAM_ERROR, Outcome.TIMEOUT)


def scope_filter(tenant_ids: list | None, field: str = "tenant_id") -> Q:
    """Every row for platform admins (`None`), else only the listed tenants' rows."""
    return Q() if tenant_ids is None else Q(**{f"{field}__in": tenant_ids})


def events_in(tenant_ids, tr: TimeRange):
    return UsageEvent.objects.filter(scope_filter(tenant_ids), occurred_at__gte=tr.start, occurred_at__lt=tr.end)


def series(events, tr: TimeRange, value=None) -> list[tuple]:
    """(bucket start, value) for every bucket of the range, zero where nothing happened."""
    rows = (events.annotate(bucket=Trunc("occurred_at", tr.unit, tzinfo=dt_timezone.utc)).values("bucket")
            .annotate(v=value or Count("id")).order_by())
    found = {row["bucket"]: row["v"] or 0 for row in rows}
    return [(bucket, float(found.get(bucket, 0))) for bucket in tr.buckets()]


def percentile(events, field: str, q: float) -> float | None:
    """The q-quantile of a column (nearest rank), computed in the database."""
    values = events.exclude(**{f"{field}__isnull": True})
    count = values.count()
    if not count:
        return None
    rank = max(math.ceil(q * count) - 1, 0)
    return values.order_by(field).values_list(field, flat=True)[rank]


def error_rate(events) -> float | None:
    """Share of requests that failed on our side (engine error or timeout), not client mistakes."""
    totals = events.aggregate(total=Count("id"), bad=Count("id", filter=Q(outcome__in=SERVER_ERRORS)))
    return totals["bad"] / totals["total"] if totals["total"] else None


def cost_per_completion(tenant_ids, tr: TimeRange) -> Decimal | None:
    """Total cost (idle included) per completed request over the range's hours, from the usage rollups."""
    query = selectors.UsageQuery(tenant_ids=tenant_ids, since=floor(tr.start, "hour"), until=tr.end,
                                 granularity=Granularity.HOUR)
    rows = selectors.cost_table(query, "tenant")
    completions = sum(row["completions"] for row in rows)
    if not completions:
        return None
    return sum((Decimal(row["total_cost_usd"]) for row in rows), Decimal(0)) / completions


def top_tenants(events, limit: int = 5) -> list[tuple[str, float]]:
    rows = (events.values("tenant__slug").annotate(n=Count("id")).order_by("-n", "tenant__slug")[:limit])
    return [(row["tenant__slug"] or "(unattributed)", float(row["n"])) for row in rows]


def visible_deployments(tenant_ids):
    """Deployments of the listed tenants; platform admins (`None`) also see shared pools."""
    if tenant_ids is None:
        return Deployment.objects.all()
    return Deployment.objects.filter(tenant_id__in=tenant_ids)


def instances_by_state(deployments) -> list[tuple[str, float]]:
    counts = dict(Instance.objects.filter(deployment__in=deployments).values_list("state").annotate(n=Count("id")))
    return [(state.label, float(counts.get(state.value, 0))) for state in InstanceState]
