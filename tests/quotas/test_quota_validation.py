"""Quota policies: bad limits are 400s naming the field; one tenant-wide policy; narrowing stays in the tenant."""
import pytest
from django.core.exceptions import ValidationError

from audit.models import AuditEvent
from quotas import services
from quotas.models import LIMIT_BOUNDS, MAX_ALLOWED_MODELS, QuotaPolicy
from tests.conftest import bearer
from tests.factories import SYSTEM, make_key, make_member, make_user


def _quotas(tenant) -> str:
    return f"/api/v1/tenants/{tenant.slug}/quotas/"


def _tenant_policy(tenant) -> QuotaPolicy:
    return QuotaPolicy.objects.get(tenant=tenant, api_key=None, user=None)


@pytest.fixture
def dev(alice):
    return make_member(alice.tenant, "developer", make_user("dana"))


BAD_VALUES = [(name, value) for name, bound in LIMIT_BOUNDS.items() for value in (-1, bound + 1, "lots", 1.5)] + [
    ("monthly_budget_usd", "-0.01"), ("monthly_budget_usd", "1000000000.01"), ("monthly_budget_usd", "cheap"),
    ("allowed_models", "qwen"), ("allowed_models", ["ok-model", "bad model name"]), ("allowed_models", [""]),
    ("allowed_models", [f"m{i}" for i in range(MAX_ALLOWED_MODELS + 1)]), ("allowed_models", [{"name": "x"}]),
]


@pytest.mark.parametrize("field,value", BAD_VALUES)
def test_bad_limit_on_update_is_400_naming_the_field(alice, field, value):
    policy = _tenant_policy(alice.tenant)
    response = bearer(alice.key).patch(f"{_quotas(alice.tenant)}{policy.pk}/", {field: value}, format="json")
    assert response.status_code == 400 and field in response.json(), response.content
    policy.refresh_from_db()
    assert getattr(policy, field) is None


@pytest.mark.parametrize("field,value", BAD_VALUES[:8])
def test_bad_limit_on_create_is_400_naming_the_field(alice, dev, field, value):
    response = bearer(alice.key).post(_quotas(alice.tenant), {"user_id": dev.pk, field: value}, format="json")
    assert response.status_code == 400 and field in response.json()
    assert not QuotaPolicy.objects.filter(user=dev).exists()


@pytest.mark.parametrize("field,value", [("requests_per_minute", -1), ("tokens_per_minute", 10**11),
                                         ("allowed_models", ["bad name"]), ("allowed_models", "qwen"),
                                         ("allowed_models", [3]), ("burst", 5)])
def test_service_validates_whoever_calls_it(alice, dev, field, value):
    with pytest.raises(ValidationError) as error:
        services.create_quota_policy(tenant=alice.tenant, user=dev, actor=SYSTEM, **{field: value})
    assert field in error.value.message_dict


def test_limits_at_their_bounds_are_accepted(alice):
    policy = _tenant_policy(alice.tenant)
    body = {**LIMIT_BOUNDS, "monthly_budget_usd": "1000000000.00",
            "allowed_models": ["qwen2.5-coder:7b", "org/model@v1"]}
    response = bearer(alice.key).patch(f"{_quotas(alice.tenant)}{policy.pk}/", body, format="json")
    assert response.status_code == 200, response.content
    assert {k: response.json()[k] for k in LIMIT_BOUNDS} == LIMIT_BOUNDS


def test_allowed_models_are_deduplicated_sorted_and_empty_means_all(alice):
    policy = services.update_quota_policy(_tenant_policy(alice.tenant), allowed_models=["b", "a", "b"], actor=SYSTEM)
    assert policy.allowed_models == ["a", "b"]
    assert services.update_quota_policy(policy, allowed_models=[], actor=SYSTEM).allowed_models is None


def test_each_tenant_gets_exactly_one_tenant_wide_policy(alice, bob):
    for tenant in (alice.tenant, bob.tenant):
        assert QuotaPolicy.objects.filter(tenant=tenant, api_key=None, user=None).count() == 1
    assert AuditEvent.objects.filter(action="quota.create", tenant=alice.tenant).count() == 1


def test_a_second_tenant_wide_policy_is_refused(alice):
    response = bearer(alice.key).post(_quotas(alice.tenant), {"requests_per_minute": 5}, format="json")
    assert response.status_code == 400 and "api_key_id" in response.json()
    with pytest.raises(ValidationError):
        services.create_quota_policy(tenant=alice.tenant, requests_per_minute=5, actor=SYSTEM)
    assert QuotaPolicy.objects.filter(tenant=alice.tenant).count() == 1


def test_a_second_policy_for_the_same_key_is_400(alice):
    key = make_key(alice.tenant, alice.user).api_key
    first = bearer(alice.key).post(_quotas(alice.tenant), {"api_key_id": key.pk, "requests_per_minute": 5},
                                   format="json")
    assert first.status_code == 201
    again = bearer(alice.key).post(_quotas(alice.tenant), {"api_key_id": key.pk, "requests_per_minute": 6},
                                   format="json")
    assert again.status_code == 400 and any(field.startswith("api_key") for field in again.json())


def test_tenant_wide_policy_cannot_be_deleted(alice):
    response = bearer(alice.key).delete(f"{_quotas(alice.tenant)}{_tenant_policy(alice.tenant).pk}/")
    assert response.status_code == 400 and "subject" in response.json()


def test_narrowing_to_a_key_or_user_of_the_tenant(alice, dev):
    key = make_key(alice.tenant, dev, role="developer", scopes=("inference",)).api_key
    by_key = bearer(alice.key).post(_quotas(alice.tenant), {"api_key_id": key.pk, "tokens_per_minute": 9},
                                    format="json")
    by_user = bearer(alice.key).post(_quotas(alice.tenant), {"user_id": dev.pk, "requests_per_minute": 3},
                                     format="json")
    assert (by_key.status_code, by_key.json()["subject"], by_key.json()["api_key_prefix"]) == (201, "api_key",
                                                                                               key.prefix)
    assert (by_user.status_code, by_user.json()["subject"]) == (201, "user")


def test_cannot_narrow_to_another_tenants_key_or_user(alice, bob):
    b_key = make_key(bob.tenant, bob.user).api_key
    for body, field in (({"api_key_id": b_key.pk}, "api_key_id"), ({"user_id": bob.user.pk}, "user_id")):
        response = bearer(alice.key).post(_quotas(alice.tenant), {**body, "requests_per_minute": 1}, format="json")
        assert response.status_code == 400 and field in response.json()
    for subject in ({"api_key": b_key}, {"user": bob.user}):
        with pytest.raises(ValidationError):
            services.create_quota_policy(tenant=alice.tenant, actor=SYSTEM, **subject)
    assert not QuotaPolicy.objects.filter(tenant=alice.tenant).exclude(api_key=None, user=None).exists()


def test_cannot_narrow_to_key_and_user_at_once(alice, dev):
    key = make_key(alice.tenant, dev).api_key
    response = bearer(alice.key).post(_quotas(alice.tenant), {"api_key_id": key.pk, "user_id": dev.pk}, format="json")
    assert response.status_code == 400 and "api_key" in response.json()


def test_subject_of_a_policy_cannot_be_changed(alice, dev):
    policy = services.create_quota_policy(tenant=alice.tenant, user=dev, requests_per_minute=1, actor=SYSTEM)
    response = bearer(alice.key).patch(f"{_quotas(alice.tenant)}{policy.pk}/", {"user_id": alice.user.pk},
                                       format="json")
    assert response.status_code == 200
    policy.refresh_from_db()
    assert policy.user == dev


def test_other_tenants_policy_is_404(alice, bob):
    url = f"{_quotas(alice.tenant)}{_tenant_policy(bob.tenant).pk}/"
    assert bearer(alice.key).patch(url, {"requests_per_minute": 1}, format="json").status_code == 404
    assert bearer(alice.key).get(f"{_quotas(bob.tenant)}").status_code == 404
