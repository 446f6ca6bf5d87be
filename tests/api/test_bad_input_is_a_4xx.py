"""Bad input never produces a stack trace: malformed JSON, wrong types, odd query strings → 4xx JSON.

The second half takes the whole class: every write endpoint with every field poisoned (NUL, unpaired
surrogates, numbers past bigint, nested too deep, wrong content types), every documented query parameter,
every kind of caller, and the errors services and the database raise below the views.
"""
import base64
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ObjectDoesNotExist
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import DataError, IntegrityError, transaction
from rest_framework.test import APIRequestFactory

from apikeys.models import ApiKey
from audit.actor import Actor
from audit.models import AuditEvent
from audit.services import record_event
from controlplane.api.pagination import MAX_PAGE_SIZE
from models_registry.models import ModelVersion
from quotas.models import QuotaPolicy
from tenants.models import Membership
from tenants.roles import Role
from tests.api.conftest import snapshot_tenant
from tests.conftest import bearer
from tests.factories import make_key

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


@pytest.mark.parametrize("method,url,body,field", WRONG_TYPES,
                         ids=[f"{c[1].rsplit('/', 2)[-2]}-{c[3]}-{i}" for i, c in enumerate(WRONG_TYPES)])
def test_wrong_types_are_400_naming_the_field(owner, method, url, body, field):
    data = _assert_json_4xx(getattr(owner, method)(url, body, format="json"), 400)
    assert field in data


@pytest.mark.parametrize("body", [[], "string", 42, [{"name": "x"}]],
                         ids=["list", "string", "number", "list-of-objects"])
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
    users = User.objects.bulk_create(User(username=f"bulk{i}",
                                          email=f"bulk{i}@example.test") for i in range(MAX_PAGE_SIZE + 5))
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
    f"{T}/keys/?role=bogus", f"{T}/quotas/?api_key=abc", f"{T}/quotas/?user=1e400",
    f"{T}/quotas/?api_key=99999999999999999999999",
    "/api/v1/audit/events/?since=yesterday", "/api/v1/audit/events/?since=2026-13-45T00:00:00Z",
    "/api/v1/audit/events/?until=2026-01-01T00:00:00", "/api/v1/audit/events/?tenant=%00",
    "/api/v1/audit/events/?actor=%00",
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
    f"{T}/keys/99999999999999999999999/", f"{T}/members/99999999999999999999999/",
    f"{T}/quotas/99999999999999999999999/",
    "/api/v1/audit/events/99999999999999999999999/", f"{T}/keys/99999999999999999999999/rotate/",
])
def test_out_of_range_ids_are_404_json(owner, url):
    method = "post" if url.endswith("rotate/") else "get"
    _assert_json_4xx(getattr(owner, method)(url), 404)


def test_unknown_filter_names_are_ignored_not_errors(owner):
    response = owner.get(f"{T}/members/?no_such_filter=1&__proto__=x")
    assert response.status_code == 200


# --- The whole class: every write endpoint, every field, every caller (world: tests/api/world.py) ---

@pytest.fixture
def populated(alice, bob, charlie):
    from tests.api.world import build_world

    return build_world(alice, charlie)


def _valid_writes(world) -> list[tuple[str, str, dict]]:
    """One accepted body for every write operation with a body, aimed at objects of the world."""
    ids = world.ids
    draft = ModelVersion.objects.get(version="v2")
    auditor = Membership.objects.get(tenant=world.tenant, role=Role.AUDITOR).user
    member = Membership.objects.get(tenant=world.tenant, role=Role.DEVELOPER)
    quota = QuotaPolicy.objects.get(tenant=world.tenant, user__isnull=False)
    model_pk = draft.model_id
    return [
        ("post", "/api/v1/tenants/", {"slug": "fresh", "name": "Fresh", "region": "eu", "admin_email": "o@fresh.test"}),
        ("patch", f"{T}/", {"name": "Renamed", "region": "eu"}),
        ("post", f"{T}/members/", {"email": "new@example.test", "role": "viewer", "username": "newbie"}),
        ("patch", f"{T}/members/{member.pk}/", {"role": "viewer"}),
        ("post", f"{T}/keys/", {"name": "k", "scopes": ["inference"]}),
        ("post", f"{T}/keys/{ids['keys'][0]}/rotate/", {"grace_seconds": 60}),
        ("post", f"{T}/quotas/", {"user_id": auditor.pk, "requests_per_minute": 5, "allowed_models": ["fuzz-coder"]}),
        ("patch", f"{T}/quotas/{quota.pk}/", {"requests_per_minute": 5, "monthly_budget_usd": "10.00"}),
        ("post", "/api/v1/models/", {"name": "fresh-model", "description": "d"}),
        ("patch", f"/api/v1/models/{model_pk}/", {"description": "d"}),
        ("post", f"/api/v1/models/{model_pk}/versions/", {"version": "v9", "artifact_uri": "fuzz-coder",
                                                           "engine_args": ENGINE_ARGS}),
        ("patch", f"/api/v1/models/{model_pk}/versions/{draft.pk}/", {"dtype": "float16", "engine_args": ENGINE_ARGS}),
        ("post", "/api/v1/deployments/", {"tenant": "tenant-a", "name": "fresh", "model_version": world.version.pk,
                                          "runtime_backend": "simulator", "simulator_params": {"log_level": "info"}}),
        ("post", f"/api/v1/deployments/{ids['deployments'][0]}/scale/", {"min_replicas": 1}),
        ("post", "/api/v1/usage/gpu-prices/", {"gpu_type": "a100", "hourly_usd": "1.5", "note": "n"}),
    ]


ENGINE_ARGS = {"max_num_seqs": 2, "tool_call_parser": "hermes"}  # a string flag: its value reaches the database
# Sent as JSON text (json.dumps), so `\u0000` and a lone `\ud800` reach the server as the escapes a client sends.
POISONS = ["x\x00y", "x\ud800y", {"k": "x\x00y"}, {"k\x00": 1}, {"k": "\ud800"}, ["x\x00y"], 10**30, -(10**30)]
BAD_STRINGS = ["x\x00y", "x\ud800y"]


def _poisoned(body: dict):
    """(field, bad value) for each field: every poison, and for an object field each of its strings made bad."""
    for field, value in body.items():
        for poison in POISONS:
            yield field, poison
        for key, inner in (value.items() if isinstance(value, dict) else ()):
            if isinstance(inner, str):
                yield from ((field, {**value, key: bad}) for bad in BAD_STRINGS)


def _send(client, method, url, body: str, content_type="application/json"):
    """In a rolled-back savepoint, so an accepted write does not change what the next request sees."""
    with transaction.atomic():
        response = client.generic(method.upper(), url, body, content_type=content_type)
        transaction.set_rollback(True)
    return response


def test_each_valid_write_is_accepted_so_the_poisoned_ones_reach_the_services(populated):
    client = bearer(populated.callers["platform"])
    for method, url, body in _valid_writes(populated):
        response = _send(client, method, url, json.dumps(body))
        assert response.status_code in (200, 201), (method, url, response.status_code, response.content[:300])


def test_a_poisoned_field_of_any_write_is_a_4xx_never_a_500(populated):
    """NUL, unpaired surrogates (also inside JSON objects and as keys), numbers beyond bigint: each field of each
    write."""
    client = bearer(populated.callers["platform"])
    for method, url, body in _valid_writes(populated):
        for field, poison in _poisoned(body):
            response = _send(client, method, url, json.dumps({**body, field: poison}))
            where = (method, url, field, poison, response.status_code, response.content[:300])
            assert response.status_code < 500, where
            assert response["Content-Type"].startswith("application/json"), where
            if isinstance(poison, (str, dict)):  # a NUL or a surrogate is never stored: refused, naming the field
                assert response.status_code == 400 and field in response.json(), where


# (content type, body, expected status; None: whatever the fields say, but never a 5xx and always JSON)
WRONG_BODIES = [("text/plain", "name=x", 415), ("application/xml", "<name>x</name>", 415),
                ("multipart/form-data", "--x\r\n", 400), ("application/json", b"\xff\xfe{}", 400),
                ("application/json", "[" * 5000 + "]" * 5000, 400),
                ("application/json", '{"a":' * 900 + "1" + "}" * 900, None),
                ("application/json", "[" * 950 + "]" * 950, None)]


@pytest.mark.parametrize("content_type,raw,expected", WRONG_BODIES,
                         ids=["text", "xml", "multipart-no-boundary", "not-utf8", "lists-5000", "objects-900",
                              "lists-950"])
def test_wrong_content_types_and_bodies_are_4xx_json_on_every_write(populated, content_type, raw, expected):
    client = bearer(populated.callers["platform"])
    for method, url, _ in _valid_writes(populated):
        response = _send(client, method, url, raw, content_type=content_type)
        where = (method, url, response.status_code, response.content[:300])
        assert response.status_code < 500 and response["Content-Type"].startswith("application/json"), where
        if expected is not None:
            assert response.status_code == expected, where


QUERY_POISONS = ["%00", "a%00b", "%ED%A0%80", "9" * 30, "-1", "2026-02-30T00:00:00Z", "yesterday", "%FF"]


def test_a_poisoned_query_parameter_of_any_read_is_never_a_500(populated):
    """Every query parameter the schema documents, on every GET operation, with NUL, bad UTF-8, huge numbers, bad
    dates."""
    from tests.api.world import openapi_document

    client = bearer(populated.callers["platform"])
    for path, operations in openapi_document()["paths"].items():
        if "get" not in operations or "{" in path:
            continue
        for name in [p["name"] for p in operations["get"].get("parameters", []) if p["in"] == "query"]:
            for value in QUERY_POISONS:
                response = client.get(f"{path}?{name}={value}")
                assert response.status_code < 500, (path, name, value, response.status_code)
                assert "html" not in response["Content-Type"], (path, name, value)


# --- Errors raised below the views ---

def test_a_developer_service_key_creating_a_key_is_a_403_and_audited(alice):
    """It has MANAGE_OWN_KEYS, but a service key is nobody: there is no "own" key to mint (was an HTML 500)."""
    client = bearer(make_key(alice.tenant, None, role=Role.DEVELOPER, name="ci").raw)
    before = ApiKey.objects.count()
    data = _assert_json_4xx(client.post(f"{T}/keys/", {"name": "k", "scopes": ["inference"]}, format="json"), 403)
    assert "service key" in data["detail"]
    assert ApiKey.objects.count() == before
    assert AuditEvent.objects.filter(action="auth.permission_denied", after__path=f"{T}/keys/").exists()


def test_every_kind_of_caller_creating_a_key_gets_a_json_answer(populated):
    for caller, key in populated.callers.items():
        response = _send(bearer(key), "post", f"{T}/keys/", json.dumps({"name": "k", "scopes": ["inference"]}))
        assert response.status_code in (201, 403), (caller, response.status_code, response.content[:300])
        assert response["Content-Type"].startswith("application/json"), caller


def test_deleting_a_tenant_that_still_has_deployments_is_a_4xx_naming_them(populated):
    """Deployment.tenant is PROTECT: a 400 when the service sees them first, a 409 from the database otherwise."""
    response = bearer(populated.callers["platform"]).delete(f"{T}/")
    assert "deployment" in json.dumps(_assert_json_4xx(response, 400, 409))


def test_a_caller_who_may_read_no_tenants_usage_gets_no_rows_not_a_500(populated):
    """An auditor may read no tenant's usage: `tenant_id IN ()` used to crash the raw aggregate."""
    client = bearer(populated.callers["auditor"])
    for url in ("/api/v1/usage/series", "/api/v1/usage/breakdown", "/api/v1/usage/costs"):
        response = client.get(url)
        assert response.status_code in (200, 403), (url, response.status_code, response.content[:200])
        if response.status_code == 200:
            assert response.json().get("points", response.json().get("rows")) == []


@pytest.mark.parametrize("url",
                         ["/api/v1/no-such-route", "/api/v1/tenants/tenant-a%00/", "/api/v1/tenants/UPPER/keys/"])
def test_an_unknown_api_route_is_a_json_404(owner, url):
    _assert_json_4xx(owner.get(url), 404)


@pytest.mark.parametrize("exc,expected", [
    (IntegrityError("duplicate key value violates unique constraint"), 409),
    (DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"), 400),
    (UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"), 400),
    (OverflowError("Python int too large to convert to SQLite INTEGER"), 400),
    (ObjectDoesNotExist("Tenant matching query does not exist."), 404),
    (DjangoPermissionDenied("Not for you."), 403),
    (RuntimeError("a bug"), 500),
], ids=["integrity", "data", "surrogate", "overflow", "does-not-exist", "django-permission-denied", "bug"])
def test_errors_from_below_the_views_are_drf_json_with_the_right_status(alice, exc, expected):
    """What a service or the database raises, through the API's exception handler: never an HTML page."""
    from controlplane.api.exceptions import exception_handler

    request = APIRequestFactory().get(f"{T}/")
    request.user, request.auth = alice.user, None
    response = exception_handler(exc, {"request": request, "view": None})
    assert response.status_code == expected
    assert set(response.data) <= {"detail", "non_field_errors", "request_id"}
    assert "SQL" not in str(response.data) and "NUL (0x00)" not in str(response.data)  # nothing of the internals
    if expected == 403:
        assert response.data["detail"] == "Not for you."
        assert AuditEvent.objects.filter(action="auth.permission_denied", after__detail="Not for you.").exists()
