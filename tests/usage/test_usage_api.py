"""/api/v1/usage/: tenant-scoped reads from rollups, CSV download, GPU prices."""
import csv
import io
from datetime import timedelta

import pytest

from tenants.roles import Role
from tests.conftest import bearer
from tests.factories import make_key, make_member, make_user
from tests.usage.events import BASE, at, event
from usage.models import GpuPrice, UsageEvent
from usage.rollups import roll_up_day, roll_up_hours
from usage.services import record_usage_batch

NOW = BASE + timedelta(days=2)
WINDOW = (f"since={BASE.isoformat().replace('+00:00', 'Z')}"
          f"&until={(BASE + timedelta(days=1)).isoformat().replace('+00:00', 'Z')}")


@pytest.fixture
def traffic(alice, bob):
    record_usage_batch([event(alice.tenant, at(minutes=m), api_key_prefix="sy_a1", ttft_ms=100.0 + m)
                        for m in range(10)]
                       + [event(bob.tenant, at(hours=2), api_key_prefix="sy_b1", outcome="timeout", status_code=504)])
    roll_up_hours(BASE, BASE + timedelta(days=1), now=NOW)
    roll_up_day(BASE, now=NOW)


def _staff_client(charlie):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(charlie.user)
    return client


def test_series_counts_requests_tokens_and_percentiles(alice, traffic):
    body = bearer(alice.key).get(f"/api/v1/usage/series?granularity=hour&{WINDOW}").json()
    [point] = body["points"]
    assert (point["requests"], point["prompt_tokens"], point["completion_tokens"]) == (10, 1000, 200)
    assert 100 <= point["ttft_p50_ms"] <= 150  # the 100-150 ms bucket
    assert point["error_rate"] == 0


def test_tenant_b_is_a_404_and_unfiltered_reads_show_only_your_tenant(alice, bob, traffic):
    client = bearer(alice.key)
    assert client.get(f"/api/v1/usage/series?tenant=tenant-b&{WINDOW}").status_code == 404
    assert client.get(f"/api/v1/usage/costs?tenant=tenant-b&{WINDOW}").status_code == 404
    assert client.get(f"/api/v1/usage/breakdown?tenant=no-such&{WINDOW}").status_code == 404
    rows = client.get(f"/api/v1/usage/breakdown?by=key&{WINDOW}").json()["rows"]
    assert [row["key"] for row in rows] == ["sy_a1"]
    rows = bearer(bob.key).get(f"/api/v1/usage/breakdown?by=tenant&{WINDOW}").json()["rows"]
    assert [(row["tenant"]["slug"], row["timeout"]) for row in rows] == [("tenant-b", 1)]


def test_a_viewer_reads_usage_and_a_platform_admin_reads_every_tenant(alice, charlie, traffic):
    viewer = make_member(alice.tenant, Role.VIEWER, make_user("avi"))
    viewer_key = make_key(alice.tenant, viewer, role=Role.VIEWER).raw
    assert bearer(viewer_key).get(f"/api/v1/usage/series?{WINDOW}").status_code == 200
    rows = _staff_client(charlie).get(f"/api/v1/usage/breakdown?by=tenant&{WINDOW}").json()["rows"]
    assert {row["tenant"]["slug"]: row["requests"] for row in rows} == {"tenant-a": 10, "tenant-b": 1}


def test_charts_read_rollups_not_raw_events(alice, traffic):
    UsageEvent.objects.all().delete()  # as after retention: the charts still answer
    body = bearer(alice.key).get(f"/api/v1/usage/series?{WINDOW}").json()
    assert body["points"][0]["requests"] == 10


def test_breakdown_downloads_as_csv(alice, traffic):
    response = bearer(alice.key).get(f"/api/v1/usage/breakdown?by=tenant&format=csv&{WINDOW}")
    assert response["Content-Type"].startswith("text/csv")
    [row] = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert (row["tenant"], row["requests"]) == ("tenant-a", "10")


def test_bad_queries_are_400s_naming_the_parameter(alice):
    client = bearer(alice.key)
    assert "granularity" in client.get("/api/v1/usage/series?granularity=minute").json()
    assert "since" in client.get("/api/v1/usage/series?granularity=hour&since=2020-01-01T00:00Z").json()
    assert "key" in client.get("/api/v1/usage/costs?key=sy_a1").json()
    assert "by" in client.get("/api/v1/usage/breakdown?by=colour").json()


def test_anonymous_callers_get_401(api):
    assert api.get("/api/v1/usage/series").status_code == 401
    assert api.get("/api/v1/usage/gpu-prices").status_code == 401


def test_everyone_reads_gpu_prices_only_platform_admins_set_them(alice, charlie):
    listed = bearer(alice.key).get("/api/v1/usage/gpu-prices").json()["results"]
    prices = {row["gpu_type"]: row["hourly_usd"] for row in listed}
    assert prices["H100"] == "4.0000" and prices["cpu"] == "0.0400"
    assert bearer(alice.key).post("/api/v1/usage/gpu-prices",
                                  {"gpu_type": "H100", "hourly_usd": "1"}).status_code == 403
    response = _staff_client(charlie).post("/api/v1/usage/gpu-prices", {"gpu_type": "H100", "hourly_usd": "3.50"})
    assert response.status_code == 201
    listed = bearer(alice.key).get("/api/v1/usage/gpu-prices").json()["results"]
    prices = {row["gpu_type"]: row["hourly_usd"] for row in listed}
    assert prices["H100"] == "3.5000"
    assert GpuPrice.objects.filter(gpu_type="H100").count() == 2  # the old price stays for old hours
    from audit.models import AuditEvent

    assert AuditEvent.objects.filter(action="usage.gpu_price.set").count() == 1
    assert _staff_client(charlie).post("/api/v1/usage/gpu-prices",
                                       {"gpu_type": "H100", "hourly_usd": "-1"}).status_code == 400
