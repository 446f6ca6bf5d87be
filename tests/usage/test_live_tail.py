"""Every usage read counts a request as soon as its event is stored, and the same after the rollup.

Rollups are read up to the watermark (the first hour not yet finally rolled up), raw events from it
on, each hour from one source only (usage/live.py): no rollup run is needed, none double-counts.
"""
from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.models import Deployment, Instance
from models_registry.models import Model, ModelVersion
from tests.usage.events import event
from usage import live
from usage.models import Granularity, UsageEvent, UsageRollup
from usage.periods import DAY, HOUR, floor_day, floor_hour
from usage.refresh import refresh_rollups
from usage.rollups import roll_up_hours
from usage.selectors import UsageQuery, breakdown, cost_table, time_series
from usage.services import record_usage_batch


@pytest.fixture
def pool(tenant_a):
    """Tenant A's H100 deployment, up since two hours ago: the tail's cost is allocated live."""
    model = Model.objects.create(name="live-coder")
    version = ModelVersion.objects.create(model=model, version="1", artifact_uri="file:///m", quantization="awq")
    deployment = Deployment.objects.create(tenant=tenant_a, name="a-h100", model_version=version, gpu_type="H100")
    started = timezone.now() - timedelta(hours=2)
    return Instance.objects.create(deployment=deployment, state="ready", starting_at=started, ready_at=started)


def request(tenant, moment, instance=None, **fields):
    extra = {"instance_id": instance.pk, "model_version_id": instance.deployment.model_version_id} if instance else {}
    return event(tenant, moment, **{"api_key_prefix": "sy_live", **extra, **fields})


def figures(tenant_ids=None, **filters) -> dict:
    """What a chart or table shows for today: hourly and daily series, a breakdown and the cost table."""
    now = timezone.now()
    hourly = UsageQuery(tenant_ids, floor_hour(now) - DAY, floor_hour(now) + HOUR, Granularity.HOUR, **filters)
    daily = UsageQuery(tenant_ids, floor_day(now) - DAY, floor_day(now) + DAY, Granularity.DAY, **filters)
    costs = cost_table(hourly, "tenant")
    return {"hourly": sum(point["requests"] for point in time_series(hourly)),
            "daily": sum(point["requests"] for point in time_series(daily)),
            "by_key": {row["key"]: row["requests"] for row in breakdown(hourly, "key")},
            "completions": sum(row["completions"] for row in costs),
            "tokens_by_day": {row["day"]: row["prompt_tokens"] for row in breakdown(daily, "day")},
            "costed": all(row["total_cost_usd"] != "0.000000" for row in costs)}


def test_a_request_counts_at_once_and_the_same_after_the_rollup(tenant_a, pool):
    record_usage_batch([request(tenant_a, timezone.now(), pool)])
    before = figures()  # no rollup has run
    assert (before["hourly"], before["daily"], before["by_key"], before["completions"]) == (1, 1, {"sy_live": 1}, 1)
    assert before["costed"]  # the instance's GPU time so far, allocated live
    refresh_rollups(timezone.now())  # the current hour is rolled up, but not final: still read raw
    assert UsageRollup.objects.filter(granularity=Granularity.HOUR, period_start=floor_hour(timezone.now())).exists()
    assert figures() == before


def test_an_hour_is_read_from_its_rollup_once_final_and_never_twice(tenant_a, pool):
    now = timezone.now()
    earlier = floor_hour(now) - timedelta(minutes=30)  # the hour before, whatever the minute now
    record_usage_batch([request(tenant_a, earlier, pool), request(tenant_a, now, pool)])
    assert live.watermark(now) < floor_hour(now) - HOUR + timedelta(seconds=1)  # nothing final yet
    before = figures()
    assert (before["hourly"], before["completions"]) == (2, 2)
    refresh_rollups(timezone.now())
    # The hour before was computed after it ended: final, read from its rollup; this hour stays raw.
    assert live.watermark(timezone.now()) == floor_hour(timezone.now())
    assert figures() == before


def test_the_live_tail_keeps_tenant_key_and_version_filters(tenant_a, tenant_b, pool):
    now = timezone.now()
    record_usage_batch([request(tenant_a, now, pool), request(tenant_a, now, api_key_prefix="sy_other"),
                        request(tenant_b, now), request(tenant_b, now)])
    assert figures()["hourly"] == 4
    assert figures([tenant_a.pk])["hourly"] == 2
    assert figures([tenant_b.pk])["by_key"] == {"sy_live": 2}
    assert figures([])["hourly"] == 0
    assert figures(key="sy_other")["hourly"] == 1
    assert figures(model_version_id=pool.deployment.model_version_id)["hourly"] == 1


def test_a_range_before_the_watermark_reads_rollups_only(tenant_a):
    old = floor_hour(timezone.now()) - 10 * HOUR
    record_usage_batch([request(tenant_a, old + timedelta(minutes=5))])
    roll_up_hours(old, old + HOUR, now=timezone.now())
    UsageEvent.objects.all().delete()  # as retention would: the rollup is what counts
    query = UsageQuery(None, old, old + HOUR, Granularity.HOUR)
    assert [point["requests"] for point in time_series(query)] == [1]
    parts = live.split(query.since, query.until, query.granularity)
    assert parts.rolled == (old, old + HOUR) and parts.raw[0] >= parts.raw[1]
