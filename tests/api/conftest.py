"""Fixtures for the access-control suites: a populated tenant B, members of every role in A,
and clients that sign in through the console with CSRF enforced."""
from types import SimpleNamespace

import pytest
from django.test.utils import override_settings
from rest_framework.test import APIClient

from apikeys.models import ApiKey
from apikeys.scopes import Scope
from quotas.models import QuotaPolicy
from tenants.models import Membership
from tenants.roles import Role
from tests.conftest import bearer
from tests.factories import make_key, make_member, make_user

PASSWORD = "correct horse battery 9"  # tests.factories.make_user's default


@pytest.fixture(scope="session", autouse=True)
def fast_password_hashing():
    """PBKDF2 at full strength would dominate these suites; hashing strength is not under test."""
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


def console_login(user) -> APIClient:
    """An APIClient signed in the way a browser is: login form, CSRF cookie, then X-CSRFToken."""
    client = APIClient(enforce_csrf_checks=True)
    page = client.get("/console/login/")
    assert page.status_code == 200
    response = client.post("/console/login/", {
        "username": user.username, "password": PASSWORD,
        "csrfmiddlewaretoken": client.cookies["csrftoken"].value})
    assert response.status_code == 302, response.content
    client.credentials(HTTP_X_CSRFTOKEN=client.cookies["csrftoken"].value)
    return client


def client_for(kind: str, user, raw_key: str) -> APIClient:
    return console_login(user) if kind == "session" else bearer(raw_key)


@pytest.fixture
def world(alice, bob):
    """Tenant B with one object of every kind (a member, a key, a key quota, a user quota)."""
    b_dev = make_member(bob.tenant, Role.DEVELOPER, make_user("bdev"))
    b_key = make_key(bob.tenant, b_dev, role=Role.DEVELOPER, scopes=(Scope.INFERENCE,), name="b inference").api_key
    from audit.actor import Actor
    from quotas.services import create_quota_policy

    system = Actor.system("tests")
    b_key_quota = create_quota_policy(tenant=bob.tenant, api_key=b_key, requests_per_minute=7, actor=system)
    create_quota_policy(tenant=bob.tenant, user=b_dev, requests_per_minute=8, actor=system)
    a_dev = make_member(alice.tenant, Role.DEVELOPER, make_user("adev"))
    a_key = make_key(alice.tenant, a_dev, role=Role.DEVELOPER, scopes=(Scope.INFERENCE,), name="a inference").api_key
    return SimpleNamespace(
        alice=alice, bob=bob, a=alice.tenant, b=bob.tenant, a_dev=a_dev, a_key=a_key, b_dev=b_dev, b_key=b_key,
        a_member=Membership.objects.get(tenant=alice.tenant, user=a_dev),
        b_member=Membership.objects.get(tenant=bob.tenant, user=b_dev),
        a_quota=QuotaPolicy.objects.get(tenant=alice.tenant, api_key=None, user=None),
        b_quota=b_key_quota,
        b_tenant_quota=QuotaPolicy.objects.get(tenant=bob.tenant, api_key=None, user=None),
    )


def snapshot_tenant(tenant) -> dict:
    """Everything a write could change in a tenant, for "nothing changed" assertions."""
    tenant.refresh_from_db()
    return {
        "tenant": (tenant.slug, tenant.name, tenant.status, tenant.region, tenant.isolation),
        "members": sorted(Membership.objects.filter(tenant=tenant).values_list("user_id", "role")),
        "keys": sorted(ApiKey.objects.filter(tenant=tenant).values_list(
            "id", "name", "role", "scopes", "expires_at", "revoked_at", "user_id")),
        "quotas": sorted(QuotaPolicy.objects.filter(tenant=tenant).values_list(
            "id", "api_key_id", "user_id", "requests_per_minute", "tokens_per_minute")),
        "key_count": ApiKey.objects.filter(tenant=tenant).count(),
    }
