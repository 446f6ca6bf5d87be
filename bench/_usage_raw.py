"""Baseline questions for bench/usage_pages.py: each answered by the rollup selectors and from raw events."""
from datetime import timedelta

RAW_SQL = """
SELECT {bucket}, count(*), sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens),
       count(*) FILTER (WHERE outcome = 'ok'),
       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms),
       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY latency_ms)
FROM usage_usageevent WHERE occurred_at >= %s AND occurred_at < %s {tenant} GROUP BY 1
"""


def cases(tenant_slug: str) -> list[tuple]:
    from tenants.models import Tenant

    tenant = Tenant.objects.get(slug=tenant_slug).pk
    return [
        ("series, day, 30 d, all tenants", _rollups("day", 30), _raw("day", 30)),
        ("series, hour, 7 d, one tenant", _rollups("hour", 7, tenant), _raw("hour", 7, tenant)),
        ("series, day, 365 d, one tenant", _rollups("day", 365, tenant), _raw("day", 365, tenant)),
        ("cost by tenant, 7 d", _cost_rollups(7), _raw_cost(7)),
    ]


def _window(days: int, granularity: str):
    from django.utils import timezone

    from usage.periods import DAY, HOUR, floor_day, floor_hour

    floor, step = (floor_hour, HOUR) if granularity == "hour" else (floor_day, DAY)
    until = floor(timezone.now()) + step
    return floor(until - timedelta(days=days)), until


def _rollups(granularity: str, days: int, tenant: int | None = None):
    from usage import selectors

    def run():
        since, until = _window(days, granularity)
        selectors.time_series(selectors.UsageQuery(tenant_ids=[tenant] if tenant else None, since=since,
                                                   until=until, granularity=granularity))
    return run


def _raw(granularity: str, days: int, tenant: int | None = None):
    from django.db import connection

    sql = RAW_SQL.format(bucket=f"date_trunc('{granularity}', occurred_at, 'UTC')",
                         tenant="AND tenant_id = %s" if tenant else "")

    def run():
        params = [*_window(days, granularity), *([tenant] if tenant else [])]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            cursor.fetchall()
    return run


def _cost_rollups(days: int):
    from usage import selectors

    def run():
        since, until = _window(days, "hour")
        selectors.cost_table(selectors.UsageQuery(tenant_ids=None, since=since, until=until, granularity="hour"),
                             "tenant")
    return run


def _raw_cost(days: int):
    """Cost without CostRollup: every hour's instance cost allocated from raw events on the fly."""
    from django.utils import timezone

    from usage.cost.hourly import range_shares

    def run():
        since, until = _window(days, "hour")
        range_shares(since, until, timezone.now())
    return run
