"""What the usage records say budgeted subjects used this month (`usage.budgets.subject_month_tokens`),
which the gateway's budgets count at least (`gateway.limits.budget_floors`)."""
from datetime import timedelta

from apikeys.scopes import Scope
from gateway.limits.budget_floors import budget_floors_at
from quotas.models import QuotaPolicy
from quotas.services import create_quota_policy
from tests.factories import SYSTEM, make_key, make_member, make_user
from tests.usage.events import BASE, event
from usage.budgets import subject_month_tokens
from usage.models import UsageEvent
from usage.rollups import roll_up_hours
from usage.services import record_usage_batch

NOW = BASE + timedelta(days=3, hours=5)  # 2026-01-08 05:00
LAST_MONTH = BASE - timedelta(days=10)


def test_tenants_keys_and_users_are_counted_from_rollups_and_live_events(tenant_a, tenant_b):
    record_usage_batch([
        event(tenant_a, BASE + timedelta(minutes=1), api_key_prefix="sy_a1", user_id=7, prompt_tokens=100,
              completion_tokens=10),
        event(tenant_a, NOW - timedelta(minutes=5), api_key_prefix="sy_a1", user_id=7, prompt_tokens=5,
              completion_tokens=1),
        event(tenant_a, NOW - timedelta(minutes=4), api_key_prefix="sy_a2", user_id=8, prompt_tokens=50,
              completion_tokens=0),
        event(tenant_b, NOW - timedelta(minutes=3), api_key_prefix="sy_b1", user_id=7, prompt_tokens=1000,
              completion_tokens=0),
        event(tenant_a, LAST_MONTH, api_key_prefix="sy_a1", user_id=7, prompt_tokens=9999, completion_tokens=0),
    ])
    roll_up_hours(BASE, BASE + timedelta(hours=1), now=NOW)
    UsageEvent.objects.filter(occurred_at__lt=BASE + timedelta(hours=1)).delete()  # proves the rollup is read
    used = subject_month_tokens(NOW, tenants={tenant_a.pk}, keys={(tenant_a.pk, "sy_a1")},
                                users={(tenant_a.pk, 7), (tenant_b.pk, 8)})
    # The user's month is read from raw events only (rollups carry no user): the rolled hour's event is gone.
    assert used == {("tenant", tenant_a.pk): 166, ("api_key", tenant_a.pk, "sy_a1"): 116, ("user", tenant_a.pk, 7): 6}


def test_the_gateway_loads_a_floor_for_every_budgeted_subject(tenant_a):
    user = make_member(tenant_a, "developer", make_user("floored"))
    key = make_key(tenant_a, user, scopes=(Scope.INFERENCE,)).api_key
    other = make_key(tenant_a, scopes=(Scope.INFERENCE,)).api_key
    QuotaPolicy.objects.filter(tenant=tenant_a, api_key=None, user=None).update(monthly_token_budget=10_000)
    create_quota_policy(tenant=tenant_a, api_key=key, actor=SYSTEM, monthly_token_budget=500)
    create_quota_policy(tenant=tenant_a, api_key=other, actor=SYSTEM, requests_per_minute=10)  # no budget
    create_quota_policy(tenant=tenant_a, user=user, actor=SYSTEM, monthly_token_budget=900)
    record_usage_batch([event(tenant_a, NOW - timedelta(minutes=2), api_key_prefix=key.prefix, user_id=user.pk,
                              prompt_tokens=30, completion_tokens=3),
                        event(tenant_a, NOW - timedelta(minutes=1), api_key_prefix=other.prefix, prompt_tokens=7,
                              completion_tokens=0)])
    floors = budget_floors_at(NOW.timestamp())
    assert floors.month == "2026-01"
    assert floors.of("tenant", tenant_a.pk, tenant_a.pk) == ("2026-01", 40)
    assert floors.of("api_key", tenant_a.pk, key.pk) == ("2026-01", 33)
    assert floors.of("user", tenant_a.pk, user.pk) == ("2026-01", 33)
    assert floors.of("api_key", tenant_a.pk, other.pk) is None  # no budget, no floor
