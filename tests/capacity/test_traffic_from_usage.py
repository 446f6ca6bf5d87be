"""A traffic profile from this install's usage records: concurrency swept over the request intervals."""
from datetime import timedelta

import pytest
from django.utils import timezone

from capacity.traffic import concurrency, profile, usage_events
from tests.usage.events import event
from usage.services import record_usage_batch


def test_overlapping_requests_are_counted_in_flight_together():
    seen = concurrency([(0, 10), (5, 15), (6, 7), (20, 30)])
    assert seen.peak == 3
    assert seen.span_seconds == 30 and seen.busy_seconds == 25  # idle from 15 to 20


def test_the_p99_is_weighted_by_time_not_by_request():
    # Two in flight for 1 s out of 199 s (0.5 % of the time): the p99 is 1 even though 2 is the peak.
    intervals = [(0, 199), (50, 51)]
    seen = concurrency(intervals)
    assert (seen.peak, seen.p99) == (2, 1.0)
    assert concurrency(intervals, quantile=0.999).p99 == 2.0


def test_a_request_ending_as_another_starts_does_not_overlap_it():
    assert concurrency([(0, 10), (10, 20)]).peak == 1


def test_no_requests_no_concurrency():
    assert concurrency([]).peak == 0


def test_the_profile_scales_the_window_to_a_month_and_counts_who_sent():
    now = timezone.now()
    events = [(now - timedelta(seconds=i), 2000.0, 1000, 50, f"user:{i % 3}") for i in range(70)]
    traffic = profile(events, window=timedelta(days=7), developers=None, label="tenant a")
    assert traffic.developers == 3
    assert traffic.peak_concurrency == 2.0  # every request lasts 2 s, one starts each second
    assert (traffic.prompt_tokens, traffic.completion_tokens) == (1000, 50)
    assert traffic.completions_per_month == round(70 * 30.4 / 7)
    assert "70 requests in 7 days" in traffic.source


@pytest.mark.django_db
def test_usage_events_are_the_scope_s_completed_requests(tenant_a, tenant_b):
    now = timezone.now()
    record_usage_batch([event(tenant_a, now - timedelta(minutes=1), user_id=7),
                        event(tenant_a, now - timedelta(minutes=2), outcome="upstream_error", status_code=502),
                        event(tenant_a, now - timedelta(days=9)),
                        event(tenant_b, now - timedelta(minutes=1), api_key_prefix="sy_b", instance_id=42)])
    mine = usage_events(since=now - timedelta(days=7), tenant_ids=[tenant_a.pk])
    assert [(who, prompt) for _, _, prompt, _, who in mine] == [("user:7", 100)]
    assert [who for *_, who in usage_events(since=now - timedelta(days=7), instance_ids=[42])] == ["key:sy_b"]
    assert len(usage_events(since=now - timedelta(days=7))) == 2
