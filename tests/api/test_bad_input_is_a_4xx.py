"""Bad input never produces a stack trace: malformed JSON, wrong types, odd query strings → 4xx JSON."""
import base64

import pytest
from django.contrib.auth import get_user_model

from apikeys.models import ApiKey
from audit.actor import Actor
from audit.services import record_event
from controlplane.api.pagination import MAX_PAGE_SIZE
from tenants.models import Membership
from tests.api.conftest import snapshot_tenant
from tests.conftest import bearer

T = "/api/v1/tenants/tenant-a"


def _assert_json_4xx(response, *expected):
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])
    if expected:
        assert response.status_code in expected, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    assert b"Traceback" not in response.content
    return response.json()


@pytest.fixture
def owner(alice):
    return bearer(alice.key)


def _write_urls(alice):
    key = ApiKey.objects.get(user=alice.user)
    quota = alice.tenant.quota_policies.first()
    member = Membership.objects.get(user=alice.user)
    return [("post", f"{T}/members/"), ("patch", f"{T}/members/{member.pk}/"), ("post", f"{T}/keys/"),
            ("post", f"{T}/keys/{key.pk}/rotate/"), ("post", f"{T}/quotas/"), ("patch", f"{T}/quotas/{quota.pk}/"),
            ("patch", f"{T}/"), ("post", "/api/v1/tenants/")]


MALFORMED_BODIES = ['{"name": ', "not json at all", '{"a": 1}}', "\x00\x01", "[" * 5000 + "]" * 5000]


@pytest.mark.parametrize("raw", MALFORMED_BODIES, ids=["truncated", "text", "trailing", "binary", "nested-too-deep"])
def test_malformed_json_is_a_400(alice, charlie, raw):
    client = bearer(alice.key)
    for method, url in _write_urls(alice):
        if url == "/api/v1/tenants/":
            client = _staff(charlie)
        response = client.generic(method.upper(), url, raw, content_type="application/json")
        _assert_json_4xx(response, 400)


def _staff(charlie):
    from tests.api.conftest import console_login

    return console_login(charlie.user)


WRONG_TYPES = [
    ("post", f"{T}/members/", {"email": ["a@b.c"], "role": "viewer"}, "email"),
    ("post", f"{T}/members/", {"email": "a@example.test", "role": 5}, "role"),
    ("post", f"{T}/members/", {"email": "a@example.test", "role": "viewer", "username": "x" * 500}, "username"),
    ("post", f"{T}/members/", {"email": "a\x00@example.test", "role": "viewer"}, "email"),
    ("post", f"{T}/keys/", {"name": "k", "scopes": "inference"}, "scopes"),
    ("post", f"{T}/keys/", {"name": "k", "scopes": [{"x": 1}]}, "scopes"),
    ("post", f"{T}/keys/", {"name": {"x": 1}, "scopes": ["inference"]}, "name"),
    ("post", f"{T}/keys/", {"name": "k\x00", "scopes": ["inference"]}, "name"),
    ("post", f"{T}/keys/", {"name": "k", "scopes": ["inference"], "user_id": "abc"}, "user_id"),
    ("post", f"{T}/keys/", {"name": "k", "scopes": ["inference"], "user_id": 10**30}, "user_id"),
    ("post", f"{T}/keys/", {"name": "k", "scopes": ["inference"], "expires_at": "yesterday"}, "expires_at"),
    ("post", f"{T}/keys/", {"name": "k", "scopes": ["inference"], "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
    ("post", f"{T}/quotas/", {"user_id": 1, "requests_per_minute": "lots"}, "requests_per_minute"),
    ("post", f"{T}/quotas/", {"user_id": 1, "tokens_per_minute": 10**40}, "tokens_per_minute"),
    ("post", f"{T}/quotas/", {"user_id": 1, "monthly_budget_usd": "NaN"}, "monthly_budget_usd"),
    ("post", f"{T}/quotas/", {"user_id": 1, "allowed_models": "gpt"}, "allowed_models"),
    ("post", f"{T}/quotas/", {"user_id": 1, "allowed_models": ["bad name\x00"]}, "allowed_models"),
    ("post", f"{T}/quotas/", {"api_key_id": 10**30, "requests_per_minute": 1}, "api_key_id"),
    ("patch", f"{T}/", {"name": ["x"]}, "name"),
    ("patch", f"{T}/", {"name": "x" * 1000}, "name"),
]


@pytest.mark.parametrize("method,url,body,field", WRONG_TYPES, ids=[f"{c[1].rsplit('/', 2)[-2]}-{c[3]}-{i}" for i, c in enumerate(WRONG_TYPES)])
def test_wrong_types_are_400_naming_the_field(owner, method, url, body, field):
    data = _assert_json_4xx(getattr(owner, method)(url, body, format="json"), 400)
    assert field in data


@pytest.mark.parametrize("body", [[], "string", 42, [{"name": "x"}]], ids=["list", "string", "number", "list-of-objects"])
def test_non_object_bodies_are_400(alice, body):
    client = bearer(alice.key)
    for method, url in _write_urls(alice):
        if url != "/api/v1/tenants/":
            _assert_json_4xx(getattr(client, method)(url, body, format="json"), 400)


def test_null_patch_body_changes_nothing(alice):
    """A JSON `null` is an empty body: refused or a no-op, never a 500 and never a change."""
    client = bearer(alice.key)
    before = snapshot_tenant(alice.tenant)
    for method, url in _write_urls(alice):
        if method == "patch":
            assert client.patch(url, None, format="json").status_code in (200, 400), url
    assert snapshot_tenant(alice.tenant) == before


def test_huge_page_size_is_capped(alice, owner):
    User = get_user_model()
    users = User.objects.bulk_create(User(username=f"bulk{i}", email=f"bulk{i}@example.test") for i in range(MAX_PAGE_SIZE + 5))
    Membership.objects.bulk_create(Membership(tenant=alice.tenant, user=u, role="viewer") for u in users)
    for _ in range(MAX_PAGE_SIZE + 5):
        record_event(actor=Actor.system("bulk"), action="test.bulk", tenant=alice.tenant)
    members = owner.get(f"{T}/members/?page_size=100000").json()
    events = owner.get("/api/v1/audit/events/?page_size=100000").json()
    assert len(members["results"]) == MAX_PAGE_SIZE and members["next"]
    assert len(events["results"]) == MAX_PAGE_SIZE and events["next"]


def _cursor(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


BAD_QUERIES = [
    "/api/v1/tenants/?status=bogus", "/api/v1/tenants/?isolation=%00", "/api/v1/tenants/?region=%00",
    f"{T}/members/?role=bogus", f"{T}/members/?page=99999", f"{T}/members/?page=abc", f"{T}/members/?page=-1",
    f"{T}/keys/?role=bogus", f"{T}/quotas/?api_key=abc", f"{T}/quotas/?user=1e400", f"{T}/quotas/?api_key=99999999999999999999999",
    "/api/v1/audit/events/?since=yesterday", "/api/v1/audit/events/?since=2026-13-45T00:00:00Z",
    "/api/v1/audit/events/?until=2026-01-01T00:00:00", "/api/v1/audit/events/?tenant=%00", "/api/v1/audit/events/?actor=%00",
    "/api/v1/audit/events/?action=a%00", "/api/v1/audit/events/?cursor=garbage",
    "/api/v1/audit/events/?cursor=" + _cursor("p=abc"), "/api/v1/audit/events/?cursor=" + _cursor("p=" + "9" * 30),
    "/api/v1/audit/events/?cursor=" + _cursor("o=-5&p=1"), "/api/v1/audit/export?format=xml",
    "/api/v1/audit/export?since=2026-02-30T00:00:00Z", "/api/v1/audit/export?tenant=%00",
    "/api/v1/audit/export/manifest?actor=%00", "/api/v1/audit/export/manifest?format=pdf",
]


@pytest.mark.parametrize("url", BAD_QUERIES)
def test_bad_query_strings_are_4xx_json(owner, url):
    _assert_json_4xx(owner.get(url))


@pytest.mark.parametrize("url", [
    f"{T}/keys/99999999999999999999999/", f"{T}/members/99999999999999999999999/", f"{T}/quotas/99999999999999999999999/",
    "/api/v1/audit/events/99999999999999999999999/", f"{T}/keys/99999999999999999999999/rotate/",
])
def test_out_of_range_ids_are_404_json(owner, url):
    method = "post" if url.endswith("rotate/") else "get"
    _assert_json_4xx(getattr(owner, method)(url), 404)


def test_unknown_filter_names_are_ignored_not_errors(owner):
    response = owner.get(f"{T}/members/?no_such_filter=1&__proto__=x")
    assert response.status_code == 200
