"""Overview and tenant pages read rollups for ranges in hours or days, and raw events for the hours not
rolled up yet (usage/live.py): the first request shows up at once, and once only."""
import pytest
from django.urls import reverse
from django.utils import timezone

from tests.console.test_usage_pages import traffic
from usage.refresh import refresh_rollups
from usage.services import record_usage_batch

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("key", ["24h", "7d", "30d"])
def test_overview_over_hours_and_days_counts_rolled_up_traffic(world, login, key):
    traffic(world)  # 20 requests of tenant A, 2 engine errors, rolled up
    traffic(world, 5, tenant=world.b)
    context = login("charlie").get(reverse("console:home") + f"?range={key}").context
    assert context["total_requests"] == 25
    assert context["top_tenants"] == [("tenant-a", 20.0), ("tenant-b", 5.0)]
    assert sum(value for _, value in context["requests_series"]) == 25
    alice = login("alice").get(reverse("console:home") + f"?range={key}").context
    assert alice["total_requests"] == 20 and alice["error_rate"] == pytest.approx(0.1)
    assert 200 <= alice["ttft_p95"] <= 300  # from the summed histogram: inside the bucket holding 230 ms


def test_tenant_page_usage_summary_reads_rollups(world, login):
    traffic(world)
    rows = login("alice").get(reverse("console:tenant", args=["tenant-a"])).context["usage"]["rows"]
    assert [row["requests"] for row in rows] == [20, 20]
    assert rows[0]["error_rate"] == pytest.approx(0.1)


def first_request(world):
    """One request, stored as the gateway stores it: no rollup has run yet."""
    instance = world.dep_a.instances.get()
    record_usage_batch([{
        "request_id": "first", "occurred_at": timezone.now(), "tenant_id": world.a.pk, "api_key_prefix": "sy_first",
        "model_name": "console-coder", "model_version_id": world.version.pk, "instance_id": instance.pk,
        "endpoint": "completions", "status_code": 200, "outcome": "ok", "prompt_tokens": 30, "completion_tokens": 8,
        "ttft_ms": 120.0, "latency_ms": 300.0}])


def test_a_new_admins_first_request_is_on_the_default_views_at_once_and_not_doubled_later(world, login):
    first_request(world)
    seen = []
    for _ in range(2):  # before any rollup, then after `usage.roll_up_recent` ran
        alice = login("alice")
        home = alice.get(reverse("console:home"))  # the default range: last 24 hours
        usage = alice.get(reverse("console:usage"))
        tenant = alice.get(reverse("console:tenant", args=["tenant-a"])).context["usage"]["rows"]
        api = alice.get("/api/v1/usage/series").json()["points"]
        seen.append((home.context["total_requests"], home.context["top_tenants"], usage.context["has_traffic"],
                     [row["completions"] for row in usage.context["costs"]], [row["requests"] for row in tenant],
                     sum(point["requests"] for point in api)))
        assert "1 request<" in home.content.decode() and "No requests reached the gateway" not in home.content.decode()
        assert "No requests in this range" not in usage.content.decode()
        refresh_rollups(timezone.now())
    assert seen[0] == seen[1] == (1, [("tenant-a", 1.0)], True, [1], [1, 1], 1)
