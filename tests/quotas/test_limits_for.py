"""`limits_for` returns every policy that governs a request, and the default per-user rate."""
import pytest

from quotas import services
from quotas.models import QuotaPolicy
from tests.factories import SYSTEM, make_key, make_member, make_user


@pytest.fixture
def setup(alice):
    dana = make_member(alice.tenant, "developer", make_user("dana"))
    erin = make_member(alice.tenant, "developer", make_user("erin"))
    key, other_key = make_key(alice.tenant, dana).api_key, make_key(alice.tenant, erin).api_key
    services.create_quota_policy(tenant=alice.tenant, api_key=key, tokens_per_minute=1000, actor=SYSTEM)
    services.create_quota_policy(tenant=alice.tenant, api_key=other_key, tokens_per_minute=1, actor=SYSTEM)
    services.create_quota_policy(tenant=alice.tenant, user=erin, requests_per_minute=7, actor=SYSTEM)
    return alice.tenant, dana, erin, key


def test_tenant_only(setup):
    tenant, *_ = setup
    limits = services.limits_for(tenant=tenant)
    assert limits.tenant == QuotaPolicy.objects.get(tenant=tenant, api_key=None, user=None)
    assert (limits.api_key, limits.user, limits.user_requests_per_minute) == (None, None, 120)


def test_key_and_user_without_a_user_policy_get_the_default_rate(setup):
    tenant, dana, _, key = setup
    limits = services.limits_for(tenant=tenant, api_key=key, user=dana)
    assert limits.api_key.tokens_per_minute == 1000 and limits.user is None
    assert limits.user_requests_per_minute == 120


def test_a_user_policy_sets_the_users_rate(setup):
    tenant, _, erin, key = setup
    limits = services.limits_for(tenant=tenant, api_key=key, user=erin)
    assert limits.user.user == erin and limits.user_requests_per_minute == 7
    assert limits.api_key.api_key == key  # only the key in use, never another key's policy


def test_user_policy_without_a_rate_falls_back_to_the_default(setup, settings):
    tenant, dana, *_ = setup
    services.create_quota_policy(tenant=tenant, user=dana, tokens_per_minute=5, actor=SYSTEM)
    assert services.limits_for(tenant=tenant, user=dana).user_requests_per_minute == 120
    settings.SWITCHYARD_DEFAULT_USER_RPM = 30
    assert services.limits_for(tenant=tenant, user=dana).user_requests_per_minute == 30


def test_policies_of_another_tenant_never_apply(setup, bob):
    tenant, _, erin, key = setup
    limits = services.limits_for(tenant=bob.tenant, api_key=key, user=erin)
    assert limits.tenant.tenant == bob.tenant and limits.api_key is None and limits.user is None
