"""Overview and tenant pages read rollups for ranges in hours or days (raw events only for the last hour)."""
import pytest
from django.urls import reverse

from tests.console.test_usage_pages import traffic

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
