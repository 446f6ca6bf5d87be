"""Child process of bench/usage_pages.py, with DATABASE_URL set to the benchmark database.

Migrates, seeds (or reuses) the data, then renders every usage page and API through Django's test
client as a platform admin and as one tenant's admin: p50 / p95 over BENCH_REPEAT runs (default 10)
after a warm-up, against a 300 ms target. A second table answers three of the questions from raw
events instead of rollups (the baseline; BENCH_USAGE_BASELINE=0 skips it).
BENCH_USAGE_ONLY=text measures only the rows whose label contains `text`.
"""
import os
import statistics
import time
from datetime import timedelta

TARGET_MS = 300
TENANT = "seed-1"


def main() -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from bench._usage_seed import ensure_seeded

    call_command("migrate", verbosity=0, interactive=False)
    call_command("collectstatic", verbosity=0, interactive=False)  # pages link the hashed names, as deployed
    events = int(os.environ.get("BENCH_USAGE_EVENTS", "10000000").replace("_", ""))
    print(ensure_seeded(events), flush=True)
    repeat = int(os.environ.get("BENCH_REPEAT", "10"))
    only = os.environ.get("BENCH_USAGE_ONLY", "")
    clients = _clients()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM usage_usageevent")
        total = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FILTER (WHERE granularity = 'hour'), count(*) FROM usage_usagerollup")
        hourly, rollups = cursor.fetchone()
    print(f"\nusage pages and API, {total:,} raw events, {rollups:,} usage rollup rows ({hourly:,} hourly), "
          f"PostgreSQL; {repeat} runs each after a warm-up (ms)\n")
    print("| page or endpoint | platform admin p50 | p95 | tenant admin p50 | p95 | target | met |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for label, url, params in _cases():
        if only and only not in label:
            continue
        cells = [_timed(client, url, params, repeat) for client in clients]
        worst = max(p95 for _, p95 in cells)
        timings = " | ".join(f"{p50:,.0f} | {p95:,.0f}" for p50, p95 in cells)
        print(f"| {label} | {timings} | {TARGET_MS} | {'met' if worst < TARGET_MS else 'NO'} |", flush=True)
    if os.environ.get("BENCH_USAGE_BASELINE", "1") != "0" and not only:
        _baseline(repeat)


def _clients():
    """A platform admin (staff) and an admin of tenant seed-1 only, each signed in to the console."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from tenants.models import Membership, Tenant
    from tenants.roles import Role

    users = get_user_model().objects
    platform, _ = users.get_or_create(username="bench-platform", defaults={"is_staff": True, "is_superuser": True})
    member, _ = users.get_or_create(username="bench-tenant-admin")
    Membership.objects.get_or_create(tenant=Tenant.objects.get(slug=TENANT), user=member,
                                     defaults={"role": Role.ADMIN})
    clients = []
    for user in (platform, member):
        client = Client()
        client.force_login(user)
        clients.append(client)
    return clients


def _cases() -> list[tuple[str, str, dict]]:
    from django.utils import timezone

    now = timezone.now()
    until = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    hour_max = {"granularity": "hour", "until": until.isoformat(), "since": (until - timedelta(days=31)).isoformat()}

    def since(days):
        return {"since": (now - timedelta(days=days)).isoformat()}

    api = "/api/v1/usage/"
    hour, day = {"granularity": "hour"}, {"granularity": "day"}
    return [
        ("API series, hour, last 24 h (default)", f"{api}series", hour),
        ("API series, hour, 7 d", f"{api}series", {**hour, **since(7)}),
        ("API series, hour, 31 d (the maximum)", f"{api}series", hour_max),
        ("API series, day, 30 d (default)", f"{api}series", {}),
        ("API series, day, 365 d", f"{api}series", {**day, **since(365)}),
        ("API series, day, 365 d, one key", f"{api}series", {**day, **since(365), "key": "sy_seed0k0"}),
        ("API breakdown by tenant, 30 d", f"{api}breakdown", {"by": "tenant"}),
        ("API breakdown by model version, 365 d", f"{api}breakdown", {"by": "model_version", **since(365)}),
        ("API breakdown by quantization, hour, 31 d", f"{api}breakdown", {"by": "quantization", **hour_max}),
        ("API breakdown by key, 30 d, CSV", f"{api}breakdown", {"by": "key", "format": "csv"}),
        ("API breakdown by day, 365 d", f"{api}breakdown", {"by": "day", **since(365)}),
        ("API costs by tenant, 30 d", f"{api}costs", {"by": "tenant"}),
        ("API costs by tenant, hour, 7 d", f"{api}costs", {"by": "tenant", **hour, **since(7)}),
        ("API costs by day, 365 d", f"{api}costs", {"by": "day", **since(365)}),
        ("API costs by model version, 90 d, CSV", f"{api}costs", {"by": "model_version", "format": "csv", **since(90)}),
        ("API budgets", f"{api}budgets", {}),
        ("API gpu-prices", f"{api}gpu-prices", {}),
        *[(f"console overview, {key}", "/console/", {"range": key}) for key in ("1h", "24h", "7d", "30d")],
        *[(f"console usage, {key}", "/console/usage/", {"range": key}) for key in ("24h", "7d", "30d")],
        ("console usage, 30d, CSV", "/console/usage/", {"range": "30d", "format": "csv"}),
        *[(f"console slow requests, {key}", "/console/slow/", {"range": key}) for key in ("1h", "24h", "7d", "30d")],
        ("console tenant detail (usage summary)", f"/console/tenants/{TENANT}/", {}),
    ]


def _timed(client, url: str, params: dict, repeat: int) -> tuple[float, float]:
    _get(client, url, params)  # warm-up: connection, caches, query plans
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        _get(client, url, params)
        samples.append((time.perf_counter() - began) * 1000)
    return _p50_p95(samples)


def _get(client, url: str, params: dict) -> None:
    response = client.get(url, params)
    assert response.status_code == 200, (url, params, response.status_code)
    if getattr(response, "streaming", False):
        b"".join(response.streaming_content)


def _p50_p95(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return statistics.median(samples), samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]


def _baseline(repeat: int) -> None:
    """The same questions answered from raw events: what the rollups save."""
    from bench._usage_raw import cases

    runs = max(repeat // 3, 3)
    print(f"\nbaseline: the same totals from raw events ({runs} runs; percentiles exact) vs from rollups (ms)\n")
    print("| question | rollups p50 | raw events p50 | raw events p95 | raw / rollups |")
    print("|---|---:|---:|---:|---:|")
    for label, from_rollups, from_raw in cases(TENANT):
        rollups = _p50_p95(_samples(from_rollups, repeat))
        raw = _p50_p95(_samples(from_raw, runs))
        print(f"| {label} | {rollups[0]:,.0f} | {raw[0]:,.0f} | {raw[1]:,.0f} | {raw[0] / rollups[0]:,.0f}× |",
              flush=True)


def _samples(fn, runs: int) -> list[float]:
    fn()
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - began) * 1000)
    return samples


if __name__ == "__main__":
    main()
