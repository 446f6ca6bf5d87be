"""Completion feedback, monthly budgets and raw-event retention."""
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from audit.models import AuditEvent
from quotas.models import QuotaPolicy
from tests.usage.events import BASE, at, event
from usage.budgets import enforce_budgets, is_over_budget, month_to_date
from usage.models import CompletionFeedback, RollupRun, UsageEvent, UsageRollup
from usage.refresh import refresh_rollups
from usage.retention import prune_expired
from usage.rollups import roll_up_hours
from usage.services import FeedbackNotAllowed, record_feedback, record_usage_batch


def test_only_the_requesting_tenant_gives_feedback_and_the_last_answer_wins(tenant_a, tenant_b):
    record_usage_batch([event(tenant_a, at(minutes=1), request_id="r1")])
    with pytest.raises(FeedbackNotAllowed):
        record_feedback("r1", True, tenant=tenant_b)
    record_feedback("r1", True, tenant=tenant_a)
    record_feedback("r1", False, tenant=tenant_a)
    assert list(CompletionFeedback.objects.values_list("accepted", flat=True)) == [False]


def test_feedback_before_the_usage_event_arrives_is_kept_for_its_tenant(tenant_a, tenant_b):
    record_feedback("early", True, tenant=tenant_a)
    with pytest.raises(FeedbackNotAllowed):
        record_feedback("early", False, tenant=tenant_b)
    record_usage_batch([event(tenant_a, at(minutes=5), request_id="early")])
    roll_up_hours(BASE, BASE + timedelta(hours=1), now=BASE + timedelta(days=1))
    assert UsageRollup.objects.get().feedback_accepted == 1


def test_late_events_mark_their_hour_stale_and_the_next_run_counts_them(tenant_a):
    now = BASE + timedelta(days=2)
    roll_up_hours(BASE, BASE + timedelta(hours=1), now=now)
    record_usage_batch([event(tenant_a, at(minutes=10))])  # a day late
    assert RollupRun.objects.get(period_start=BASE).stale
    refresh_rollups(now)
    assert UsageRollup.objects.get(granularity="hour", period_start=BASE).requests == 1
    assert UsageRollup.objects.get(granularity="day", period_start=BASE).requests == 1


def test_a_tenant_over_its_token_budget_is_refused_until_the_budget_is_raised(
        tenant_a, tenant_b, django_capture_on_commit_callbacks):
    now = datetime.now(timezone.utc)
    QuotaPolicy.objects.filter(tenant=tenant_a).update(monthly_token_budget=1000)
    record_usage_batch([event(tenant_a, now - timedelta(seconds=5), prompt_tokens=900, completion_tokens=200)])
    with django_capture_on_commit_callbacks(execute=True):
        enforce_budgets(now)
    assert is_over_budget(tenant_a.pk) == "monthly token budget of 1,000 tokens used up"
    assert is_over_budget(tenant_b.pk) is None
    assert AuditEvent.objects.filter(action="tenant.over_budget", tenant_slug="tenant-a").count() == 1
    enforce_budgets(now)  # unchanged: no second audit event
    assert AuditEvent.objects.filter(action="tenant.over_budget").count() == 1

    QuotaPolicy.objects.filter(tenant=tenant_a).update(monthly_token_budget=5000)
    with django_capture_on_commit_callbacks(execute=True):  # the gateway's cached answer changes on commit
        enforce_budgets(now)
    assert is_over_budget(tenant_a.pk) is None
    assert AuditEvent.objects.filter(action="tenant.within_budget", tenant_slug="tenant-a").count() == 1


def test_month_to_date_adds_rolled_up_hours_and_the_live_hour(tenant_a):
    now = datetime.now(timezone.utc)
    month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    record_usage_batch([event(tenant_a, month + timedelta(minutes=1), prompt_tokens=10, completion_tokens=0),
                        event(tenant_a, now - timedelta(seconds=1), prompt_tokens=5, completion_tokens=0)])
    roll_up_hours(month, month + timedelta(hours=1), now=now)
    UsageEvent.objects.filter(occurred_at__lt=month + timedelta(hours=1)).delete()  # proves the rollup is read
    expected = 15 if now - month > timedelta(hours=1) else 5  # early on the 1st the first hour is still live
    assert month_to_date(now)[tenant_a.pk][0] == expected


def test_a_dollar_budget_counts_idle_capacity_too(tenant_a):
    policy = QuotaPolicy.objects.get(tenant=tenant_a)
    from usage.budgets import over_reason

    policy.monthly_budget_usd = Decimal("10.00")
    assert over_reason(policy, 0, Decimal("10.00")) == "monthly budget of $10.00 used up"
    assert over_reason(policy, 0, Decimal("9.99")) is None


def test_retention_prunes_old_events_in_batches_and_keeps_rollups(tenant_a, settings):
    settings.SWITCHYARD_USAGE_RETENTION_DAYS = 30
    settings.SWITCHYARD_USAGE_PRUNE_BATCH = 100
    now = BASE + timedelta(days=40)
    record_usage_batch([event(tenant_a, at(minutes=m % 60, seconds=m)) for m in range(250)]
                       + [event(tenant_a, now - timedelta(days=1))])
    roll_up_hours(BASE, BASE + timedelta(hours=2), now=now)
    assert prune_expired(now) == {"events": 250, "feedback": 0, "prompts": 0}
    assert UsageEvent.objects.count() == 1
    assert sum(UsageRollup.objects.values_list("requests", flat=True)) == 250
    refresh_rollups(now)  # never recomputes hours past retention
    assert sum(UsageRollup.objects.filter(granularity="hour", period_start__lt=BASE + timedelta(days=1))
               .values_list("requests", flat=True)) == 250


def test_cached_tokens_never_exceed_the_prompt(tenant_a):
    record_usage_batch([event(tenant_a, at(), prompt_tokens=10, cached_tokens=50)])
    assert UsageEvent.objects.get().cached_tokens == 10


def test_prompt_samples_are_forgotten_after_their_retention_but_the_counts_stay(tenant_a, settings):
    settings.SWITCHYARD_PROMPT_SAMPLE_RETENTION_HOURS = 24
    now = BASE + timedelta(days=2)
    old, fresh = event(tenant_a, now - timedelta(hours=25)), event(tenant_a, now - timedelta(hours=1))
    record_usage_batch([{**old, "redacted_prompt": "def old():"}, {**fresh, "redacted_prompt": "def fresh():"}])
    assert prune_expired(now)["prompts"] == 1
    assert sorted(UsageEvent.objects.values_list("redacted_prompt", flat=True)) == ["", "def fresh():"]
    assert UsageEvent.objects.count() == 2
