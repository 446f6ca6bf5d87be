"""Usage API query paths on a seeded database: answered from rollups vs computed from raw events.

    DATABASE_URL=postgres://… .venv/bin/python manage.py seed_usage --events 10000000 --days 365
    DATABASE_URL=postgres://… .venv/bin/python -m bench          # or: python -m bench.usage_pages

Each path runs BENCH_REPEAT times (default 10) after one warm-up; the table gives p50 / p95 in ms.
The baseline answers the same question from `usage_usageevent` directly (PostgreSQL: with
percentile_cont for the latency percentiles; cost: allocating every hour's instance cost on the fly).
"""
import os
import statistics
import time
from datetime import timedelta


def _setup():
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    django.setup()


def main() -> None:
    _setup()
    from django.db import connection

    from usage.models import UsageEvent

    if not UsageEvent.objects.exists():
        print("usage_pages: no usage events; run `manage.py seed_usage` first (skipped)")
        return
    repeat = int(os.environ.get("BENCH_REPEAT", "10"))
    rows = [_measure(label, api, raw, repeat) for label, api, raw in _cases()]
    print(f"usage API query paths, {UsageEvent.objects.count():,} raw events, {connection.vendor}, "
          f"{repeat} runs each (ms)\n")
    print("| query path | rollups p50 | rollups p95 | raw events p50 | raw events p95 | speed-up (p50) |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, api, raw in rows:
        speedup = f"{raw[0] / api[0]:.1f}×" if raw and api[0] else "–"
        raw_cells = f"{raw[0]:.1f} | {raw[1]:.1f}" if raw else "– | –"
        print(f"| {label} | {api[0]:.1f} | {api[1]:.1f} | {raw_cells} | {speedup} |")


def _measure(label: str, api, raw, repeat: int):
    return label, _timed(api, repeat), (_timed(raw, repeat) if raw else None)


def _timed(fn, repeat: int) -> tuple[float, float]:
    fn()  # warm-up: connection, caches, query plans
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - began) * 1000)
    samples.sort()
    p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    return statistics.median(samples), p95


def _cases():
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from tenants.models import Tenant
    from usage.api.views import UsageBreakdownView, UsageCostView, UsageSeriesView

    user, _ = get_user_model().objects.get_or_create(username="bench-usage", defaults={"is_staff": True})
    tenant = Tenant.objects.filter(slug="seed-1").first() or Tenant.objects.first()
    now = timezone.now()
    series, breakdown, costs = UsageSeriesView.as_view(), UsageBreakdownView.as_view(), UsageCostView.as_view()

    def api(view, **params):
        return lambda: _call(view, user, params)

    def since(days):
        return (now - timedelta(days=days)).isoformat()

    one = {"tenant": tenant.slug}
    return [
        ("series, day, 30 d, all tenants", api(series, since=since(30)), _raw("day", 30)),
        ("series, hour, 7 d, one tenant", api(series, granularity="hour", since=since(7), **one),
         _raw("hour", 7, tenant.pk)),
        ("series, day, 365 d, one tenant", api(series, since=since(365), **one), _raw("day", 365, tenant.pk)),
        ("breakdown by tenant, 30 d", api(breakdown, by="tenant", since=since(30)), _raw("tenant_id", 30)),
        ("breakdown by model version, 90 d", api(breakdown, by="model_version", since=since(90)),
         _raw("model_version_id", 90)),
        ("breakdown by key, 30 d, CSV", api(breakdown, by="key", since=since(30), format="csv"),
         _raw("api_key_prefix", 30)),
        ("breakdown by quantization, 30 d", api(breakdown, by="quantization", since=since(30)), None),
        ("cost by tenant, 7 d", api(costs, by="tenant", since=since(7)), _raw_cost(7)),
        ("cost by day, 90 d", api(costs, by="day", since=since(90)), None),
    ]


def _call(view, user, params):
    from rest_framework.test import APIRequestFactory, force_authenticate

    request = APIRequestFactory().get("/", params)
    force_authenticate(request, user=user)
    response = view(request)
    assert response.status_code == 200, response.status_code
    if hasattr(response, "render"):
        response.render()


def _raw(group: str, days: int, tenant_id: int | None = None):
    """The same aggregate straight from raw events."""
    from django.db import connection
    from django.utils import timezone

    expression = {"day": "date_trunc('day', occurred_at AT TIME ZONE 'UTC')",
                  "hour": "date_trunc('hour', occurred_at AT TIME ZONE 'UTC')"}.get(group, group)
    percentiles = ("percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms), "
                   "percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY latency_ms)"
                   if connection.vendor == "postgresql" else "avg(ttft_ms), avg(latency_ms)")
    if connection.vendor != "postgresql":
        expression = {"day": "date(occurred_at)", "hour": "strftime('%Y-%m-%d %H', occurred_at)"}.get(group, group)
    sql = (f"SELECT {expression}, count(*), sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens), "
           f"sum(CASE WHEN outcome = 'ok' THEN 1 ELSE 0 END), {percentiles} FROM usage_usageevent "
           f"WHERE occurred_at >= %s AND occurred_at < %s {'AND tenant_id = %s' if tenant_id else ''} GROUP BY 1")

    def run():
        now = timezone.now()
        params = [now - timedelta(days=days), now] + ([tenant_id] if tenant_id else [])
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            cursor.fetchall()
    return run


def _raw_cost(days: int):
    """Cost without CostRollup: allocate every hour's instance cost from raw events on the fly."""
    from django.utils import timezone

    from usage.cost.hourly import range_shares
    from usage.periods import floor_hour

    def run():
        now = timezone.now()
        range_shares(floor_hour(now - timedelta(days=days)), floor_hour(now), now)
    return run


if __name__ == "__main__":
    main()
