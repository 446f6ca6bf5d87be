"""set_tenant_budget: the tenant-wide policy's two monthly budgets, created if missing, audited, validated."""
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from audit.models import AuditEvent
from quotas.models import QuotaPolicy
from quotas.services import set_tenant_budget
from tests.factories import SYSTEM


def _policy(tenant) -> QuotaPolicy:
    return QuotaPolicy.objects.get(tenant=tenant, api_key=None, user=None)


def test_budgets_change_and_the_rates_stay(alice):
    QuotaPolicy.objects.filter(pk=_policy(alice.tenant).pk).update(requests_per_minute=600)
    set_tenant_budget(alice.tenant, monthly_token_budget=10**6, monthly_budget_usd=Decimal("99.5"), actor=SYSTEM)
    policy = _policy(alice.tenant)
    assert (policy.monthly_token_budget, policy.monthly_budget_usd, policy.requests_per_minute) == \
        (10**6, Decimal("99.5"), 600)
    assert AuditEvent.objects.filter(action="quota.update", tenant=alice.tenant).exists()


def test_a_tenant_without_a_policy_gets_one(alice):
    QuotaPolicy.objects.filter(tenant=alice.tenant).delete()
    set_tenant_budget(alice.tenant, monthly_token_budget=None, monthly_budget_usd=Decimal("5"), actor=SYSTEM)
    assert _policy(alice.tenant).monthly_budget_usd == Decimal("5")
    assert AuditEvent.objects.filter(action="quota.create", tenant=alice.tenant).exists()


def test_a_negative_budget_is_refused_and_nothing_is_written(alice):
    with pytest.raises(ValidationError) as refused:
        set_tenant_budget(alice.tenant, monthly_token_budget=None, monthly_budget_usd=Decimal("-1"), actor=SYSTEM)
    assert "monthly_budget_usd" in refused.value.message_dict
    assert _policy(alice.tenant).monthly_budget_usd is None
    assert not AuditEvent.objects.filter(action="quota.update").exists()
