"""Usage & cost, overview and slow requests read the gateway's usage events and the usage rollups."""
import csv
import io
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from usage.refresh import refresh_rollups
from usage.services import record_usage_batch

pytestmark = pytest.mark.django_db


def traffic(world, count=20, tenant=None):
    tenant = tenant or world.a
    instance = world.dep_a.instances.get() if tenant == world.a else world.dep_b.instances.get()
    now = timezone.now()
    record_usage_batch([{
        "request_id": f"{tenant.slug}-{i}", "occurred_at": now - timedelta(seconds=i), "tenant_id": tenant.pk,
        "api_key_prefix": "sy_test", "model_name": "console-coder", "model_version_id": world.version.pk,
        "instance_id": instance.pk, "endpoint": "completions", "status_code": 200 if i % 10 else 502,
        "outcome": "ok" if i % 10 else "upstream_error", "prompt_tokens": 100, "completion_tokens": 20,
        "ttft_ms": 50.0 + i * 10, "latency_ms": 400.0, "redacted_prompt": f"def handler_{i}(): [REDACTED:github_token]"}
        for i in range(count)])
    refresh_rollups(timezone.now())


def test_usage_page_shows_rolled_up_traffic_and_cost_per_tenant(world, login):
    traffic(world)
    traffic(world, 5, tenant=world.b)
    html = login("alice").get(reverse("console:usage")).content.decode()
    assert 'id="cost-table"' in html and "tenant-a" in html and "tenant-b" not in html
    assert "console-coder@" in html  # usage by model version
    export = login("alice").get(reverse("console:usage") + "?format=csv").getvalue().decode()
    rows = list(csv.reader(io.StringIO(export)))
    assert rows[0][0] == "tenant" and [r[0] for r in rows[1:]] == ["tenant-a"] and rows[1][1] == "18"
    everyone = login("charlie").get(reverse("console:usage") + "?format=csv").getvalue().decode()
    assert "tenant-a" in everyone and "tenant-b" in everyone


def test_overview_counts_requests_errors_and_latency(world, login):
    traffic(world)
    response = login("alice").get(reverse("console:home") + "?range=1h")
    assert response.context["total_requests"] == 20
    assert response.context["error_rate"] == pytest.approx(0.1)
    assert response.context["ttft_p95"] == 230.0
    assert response.context["top_tenants"] == [("tenant-a", 20.0)]
    assert login("bob").get(reverse("console:home")).context["total_requests"] == 0


def test_slow_requests_are_those_above_p95_slowest_first(world, login):
    traffic(world)
    response = login("alice").get(reverse("console:slow") + "?range=1h")
    assert [row["event"].ttft_ms for row in response.context["rows"]] == [240.0]
    assert response.context["rows"][0]["prompt"] == "def handler_19(): [REDACTED:github_token]"
    html = response.content.decode()
    assert "def handler_19(): [REDACTED:github_token]" in html
    # The footnote says what the page does: redacted prompt starts, kept for a day (not "not kept yet").
    assert "start of each prompt after secret redaction" in html and "cleared after 24 hours" in html
    assert "does not keep prompt text" not in html and "ranked exactly over the last hour" in html
    assert login("bob").get(reverse("console:slow") + "?range=1h").context["rows"] == []


def test_empty_pages_explain_themselves(world, login):
    assert "No requests reached the gateway" in login("alice").get(reverse("console:home")).content.decode()
    assert "No requests in this range" in login("alice").get(reverse("console:usage")).content.decode()


def test_total_cost_per_completion_is_one_figure_under_one_label_on_overview_and_usage(world, login):
    world.dep_a.instances.update(ready_at=timezone.now() - timedelta(minutes=30))
    traffic(world)  # 18 completed requests of tenant A on its own (CPU) deployment
    alice = login("alice")
    home, usage = alice.get(reverse("console:home")), alice.get(reverse("console:usage"))
    [row] = usage.context["costs"]
    assert row["completions"] == 18
    assert float(home.context["cost_per_completion"]) == pytest.approx(float(row["total_cost_per_completion_usd"]),
                                                                       rel=1e-3)
    assert float(row["total_cost_per_completion_usd"]) > float(row["cost_per_completion_usd"])  # idle included
    for page in (home, usage):
        assert "Total cost per completion" in page.content.decode()
    assert "Cost / completion" not in usage.content.decode()


def test_cpu_instances_are_counted_in_cpu_core_hours_not_gpu_hours(world, login):
    world.dep_a.instances.update(ready_at=timezone.now() - timedelta(minutes=30))  # no GPU type: 4 CPU cores
    traffic(world)
    response = login("alice").get(reverse("console:usage"))
    html = response.content.decode()
    assert ">CPU core-hours</th>" in html and "GPU-hours" not in html
    [row] = response.context["costs"]
    assert 1.9 < float(row["cpu_core_hours"]) < 2.1 and row["gpu_hours"] == "0.000000"  # 30 min × 4 cores
    header = login("alice").get(reverse("console:usage") + "?format=csv").getvalue().decode().splitlines()[0]
    assert "gpu_hours,cpu_core_hours" in header
