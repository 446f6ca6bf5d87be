"""Tenant isolation: tenant A's admin, by API key, by console session or as a single-sign-on user whose
provider's groups make them A's owner, cannot reach tenant B.

Every endpoint × every verb on B's objects answers 404 — exactly what a non-existent object gets,
so the answer tells A nothing about B. A verb a route does not have at all answers 405 for both.
Tenant-scoped reads that take the tenant as `?tenant=` (usage, budgets) answer B's slug like a
missing one. The registry and GPU prices are platform-wide, so they hold nothing of B's to reach.
"""
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from audit.actor import Actor
from audit.models import AuditEvent
from fleet.models import Deployment, Instance
from tenants.models import Invitation
from tenants.services import grant_object_permission, grant_permission
from tests.api.conftest import client_for, snapshot_tenant

# "sso_session": an owner of A who exists only through single sign-on (sso.services), signed in.
CREDENTIALS = ["api_key", "session", "sso_session"]
VERBS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
GHOST_SLUG, GHOST_ID = "no-such-tenant", 987654321

# (name, path template, verbs the route serves). {slug} and the ids are filled per target.
T = "/api/v1/tenants/{slug}"
ENDPOINTS = [
    ("tenant", T + "/", {"GET", "PATCH", "DELETE"}),
    ("tenant-suspend", T + "/suspend/", {"POST"}),
    ("tenant-activate", T + "/activate/", {"POST"}),
    ("members", T + "/members/", {"GET", "POST"}),
    ("member", T + "/members/{member}/", {"GET", "PATCH", "DELETE"}),
    ("keys", T + "/keys/", {"GET", "POST"}),
    ("key", T + "/keys/{key}/", {"GET", "DELETE"}),
    ("key-revoke", T + "/keys/{key}/revoke/", {"POST"}),
    ("key-rotate", T + "/keys/{key}/rotate/", {"POST"}),
    ("quotas", T + "/quotas/", {"GET", "POST"}),
    ("quota", T + "/quotas/{quota}/", {"GET", "PATCH", "DELETE"}),
    ("invitations", T + "/invitations/", {"GET", "POST"}),
    ("invitation", T + "/invitations/{invitation}/", {"GET", "DELETE"}),
    ("grants", T + "/grants/", {"GET", "POST"}),
    ("grant", T + "/grants/{grant}/", {"GET", "DELETE"}),
    ("deployment", "/api/v1/deployments/{deployment}/", {"GET", "DELETE"}),
    ("deployment-grants", "/api/v1/deployments/{deployment}/grants/", {"GET", "POST"}),
    ("deployment-grant", "/api/v1/deployments/{deployment}/grants/{dgrant}/", {"GET", "DELETE"}),
    ("deployment-scale", "/api/v1/deployments/{deployment}/scale/", {"POST"}),
    ("deployment-scaling", "/api/v1/deployments/{deployment}/scaling/", {"GET", "PUT"}),
    ("deployment-scaling-decisions", "/api/v1/deployments/{deployment}/scaling/decisions/", {"GET"}),
    ("deployment-routing", "/api/v1/deployments/{deployment}/routing/", {"GET", "PUT"}),
    ("deployment-scaling-samples", "/api/v1/deployments/{deployment}/scaling/samples/", {"GET"}),
    ("deployment-drain", "/api/v1/deployments/{deployment}/instances/{instance}/drain/", {"POST"}),
    ("deployment-restart", "/api/v1/deployments/{deployment}/instances/{instance}/restart/", {"POST"}),
    ("usage-series", "/api/v1/usage/series?tenant={slug}", {"GET"}),
    ("usage-breakdown", "/api/v1/usage/breakdown?tenant={slug}", {"GET"}),
    ("usage-costs", "/api/v1/usage/costs?tenant={slug}", {"GET"}),
    ("usage-budgets", "/api/v1/usage/budgets?tenant={slug}", {"GET"}),
    ("audit-event", "/api/v1/audit/events/{seq}/", {"GET"}),
    # GET of an export is a filtered collection (an empty file for B's slug), checked by
    # test_exports_hold_no_other_tenant_rows; here only the verbs the exports do not serve.
    ("audit-export", "/api/v1/audit/export?tenant={slug}", set()),
    ("audit-export-manifest", "/api/v1/audit/export/manifest?tenant={slug}", set()),
]
COLLECTION_GETS = {"audit-export", "audit-export-manifest"}
ID_ROUTES = [e for e in ENDPOINTS
             if any(f"{{{name}}}" in e[1] for name in ("member", "key", "quota", "invitation", "grant"))]


@pytest.fixture
def world(world):
    """Besides conftest's: a pending invitation, a deployment with an instance and a budget state in B,
    and a deployment of A's own."""
    from tests.models_registry.registry_helpers import make_version
    from usage.models import BudgetState

    version = make_version()
    world.b_invitation = Invitation.objects.create(tenant=world.b, email="in-b@example.test", role="viewer",
                                                   expires_at=timezone.now() + timedelta(days=1))
    world.b_deployment = Deployment.objects.create(tenant=world.b, name="coder-b", model_version=version,
                                                   runtime_backend="simulator")
    world.b_instance = Instance.objects.create(deployment=world.b_deployment, state="ready", log_tail="b's engine")
    world.a_deployment = Deployment.objects.create(tenant=world.a, name="coder-a", model_version=version,
                                                   runtime_backend="simulator")
    BudgetState.objects.create(tenant=world.b, checked_at=timezone.now())
    world.b_grant = grant_permission(tenant=world.b, user=world.b_dev, perm="view_audit", actor=Actor.system("t"))
    world.b_dgrant = grant_object_permission(obj=world.b_deployment, user=world.b_dev, perm="view_deployment",
                                             actor=Actor.system("t"))
    return world

# One body with every writable field of every endpoint, pointing at B's things, so a 404 can
# never be a validation error in disguise.
def _body(world):
    return {"name": "taken over", "email": "mallory@example.test", "role": "viewer", "scopes": ["inference"],
            "user_id": world.b_dev.pk, "permission": "view_audit", "requests_per_minute": 1, "grace_seconds": 0,
            "min_replicas": 0}


def _b_ids(world):
    seq = AuditEvent.objects.filter(tenant=world.b).values_list("seq", flat=True).first()
    return {"member": world.b_member.pk, "key": world.b_key.pk, "quota": world.b_quota.pk, "seq": seq,
            "invitation": world.b_invitation.pk, "deployment": world.b_deployment.pk, "instance": world.b_instance.pk,
            "grant": world.b_grant.pk, "dgrant": world.b_dgrant.pk}


def _ghost_ids():
    return dict.fromkeys(("member", "key", "quota", "seq", "invitation", "deployment", "instance", "grant", "dgrant"),
                         GHOST_ID)


def _client(world, cred):
    if cred != "sso_session":
        return client_for(cred, world.alice.user, world.alice.key)
    from rest_framework.test import APIClient

    from sso.providers import Provider
    from sso.services import sign_in_with_oidc

    provider = Provider(name="idp", label="IdP", issuer="https://idp.test", client_id="c", client_secret="s")
    user = sign_in_with_oidc(provider=provider, claims={
        "iss": "https://idp.test", "sub": "owner-of-a", "email": "sso-owner@a.test",
        "groups": [f"switchyard:{world.a.slug}:owner", "switchyard:no-such-tenant:owner"]})
    client = APIClient()
    client.force_login(user)
    return client


def _call(client, verb, url, body):
    response = client.generic(verb, url, json.dumps(body) if verb != "GET" else "", content_type="application/json")
    content = b"".join(response.streaming_content) if response.streaming else response.content
    return response.status_code, content


def _probe(client, template, verbs, real, ghost, body, skip=()):
    """Mismatches between what B's objects and non-existent objects get, per verb."""
    problems = {}
    for verb in (v for v in VERBS if v not in skip):
        status, content = _call(client, verb, template.format(**real), body)
        ghost_status, ghost_content = _call(client, verb, template.format(**ghost), body)
        expected = {404} if verb in verbs else {404, 405}
        if status not in expected or status != ghost_status or content != ghost_content:
            problems[verb] = (status, content[:200], "ghost:", ghost_status)
    return problems


@pytest.mark.parametrize("cred", CREDENTIALS)
@pytest.mark.parametrize("name,template,verbs", ENDPOINTS, ids=[e[0] for e in ENDPOINTS])
def test_other_tenants_objects_are_not_found(world, cred, name, template, verbs):
    client = _client(world, cred)
    before = snapshot_tenant(world.b)
    real = {"slug": world.b.slug, **_b_ids(world)}
    ghost = {"slug": GHOST_SLUG, **_ghost_ids()}
    skip = ("GET",) if name in COLLECTION_GETS else ()
    assert _probe(client, template, verbs, real, ghost, _body(world), skip) == {}
    assert snapshot_tenant(world.b) == before


@pytest.mark.parametrize("cred", CREDENTIALS)
@pytest.mark.parametrize("name,template,verbs", ID_ROUTES, ids=[e[0] for e in ID_ROUTES])
def test_other_tenants_ids_under_own_slug_are_not_found(world, cred, name, template, verbs):
    """B's member / key / quota ids put under A's own URL: the queryset is A's, so 404."""
    client = _client(world, cred)
    before = snapshot_tenant(world.b), snapshot_tenant(world.a)
    real = {"slug": world.a.slug, **_b_ids(world)}
    ghost = {"slug": world.a.slug, **_ghost_ids()}
    assert _probe(client, template, verbs, real, ghost, _body(world)) == {}
    assert (snapshot_tenant(world.b), snapshot_tenant(world.a)) == before


def _b_markers(world) -> list[str]:
    """Strings that would only appear in a response if something of B leaked."""
    return [world.b.slug, world.bob.user.username, world.b_dev.username, world.b_key.prefix, world.b.name]


def _all_audit_pages(client, url="/api/v1/audit/events/?page_size=200"):
    rows = []
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content
        rows += response.json()["results"]
        url = response.json()["next"]
    return rows


@pytest.mark.parametrize("cred", CREDENTIALS)
def test_lists_hold_only_own_tenant(world, cred):
    client = _client(world, cred)
    tenants = client.get("/api/v1/tenants/")
    assert [t["slug"] for t in tenants.json()["results"]] == [world.a.slug]
    events = _all_audit_pages(client)
    assert events and {e["tenant_id"] for e in events} == {world.a.pk}
    for path in ("/api/v1/tenants/", "/api/v1/audit/events/?page_size=200", f"/api/v1/tenants/{world.a.slug}/members/",
                 f"/api/v1/tenants/{world.a.slug}/keys/", f"/api/v1/tenants/{world.a.slug}/quotas/"):
        text = client.get(path).content.decode()
        assert not [m for m in _b_markers(world) if m in text], path


@pytest.mark.parametrize("cred", CREDENTIALS)
def test_audit_filter_naming_other_tenant_finds_nothing(world, cred):
    client = _client(world, cred)
    assert client.get(f"/api/v1/audit/events/?tenant={world.b.slug}").json()["results"] == []
    assert client.get(f"/api/v1/audit/events/?actor={world.bob.user.username}").json()["results"] == []


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
@pytest.mark.parametrize("cred", CREDENTIALS)
def test_exports_hold_no_other_tenant_rows(world, cred, fmt):
    client = _client(world, cred)
    response = client.get(f"/api/v1/audit/export?format={fmt}")
    assert response.status_code == 200
    text = b"".join(response.streaming_content).decode()
    assert world.a.slug in text
    assert not [m for m in _b_markers(world) if m in text]
    manifest = client.get(f"/api/v1/audit/export/manifest?format={fmt}").json()
    assert manifest["row_count"] == AuditEvent.objects.filter(tenant=world.a).count()
    filtered = client.get(f"/api/v1/audit/export?format={fmt}&tenant={world.b.slug}")
    assert not [m for m in _b_markers(world) if m in b"".join(filtered.streaming_content).decode().split("\n", 1)[-1]]
    assert client.get(f"/api/v1/audit/export/manifest?tenant={world.b.slug}").json()["row_count"] == 0


@pytest.mark.parametrize("cred", CREDENTIALS)
def test_filtering_by_other_tenants_id_answers_like_a_missing_id(world, cred):
    """Otherwise "not a valid choice" vs. an empty page would tell A which ids exist in B."""
    client = _client(world, cred)
    base = f"/api/v1/tenants/{world.a.slug}/quotas/"
    for param, b_id in (("api_key", world.b_key.pk), ("user", world.b_dev.pk)):
        b_answer = client.get(f"{base}?{param}={b_id}")
        ghost_answer = client.get(f"{base}?{param}={GHOST_ID}")
        assert (b_answer.status_code, b_answer.json()) == (ghost_answer.status_code, ghost_answer.json())
        assert b_answer.json()["results"] == []


# (path under A, body, the field the 400 must name): B's ids in A's request bodies.
BODY_ID_CASES = [
    ("quotas/", lambda w: {"api_key_id": w.b_key.pk, "requests_per_minute": 5}, "api_key_id"),
    ("quotas/", lambda w: {"user_id": w.b_dev.pk, "requests_per_minute": 5}, "user_id"),
    ("keys/", lambda w: {"name": "x", "scopes": ["inference"], "user_id": w.b_dev.pk}, "user_id"),
    ("keys/", lambda w: {"name": "x", "scopes": ["inference"], "user_id": w.bob.user.pk}, "user_id"),
]


@pytest.mark.parametrize("cred", CREDENTIALS)
@pytest.mark.parametrize("path,body,field", BODY_ID_CASES, ids=[f"{c[0]}{c[2]}" for c in BODY_ID_CASES])
def test_other_tenants_ids_in_bodies_are_refused_by_field(world, cred, path, body, field):
    client = _client(world, cred)
    before = snapshot_tenant(world.a), snapshot_tenant(world.b)
    response = client.post(f"/api/v1/tenants/{world.a.slug}/{path}", body(world), format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert (snapshot_tenant(world.a), snapshot_tenant(world.b)) == before


@pytest.mark.parametrize("cred", CREDENTIALS)
def test_quota_subject_cannot_be_moved_to_other_tenants_key(world, cred):
    client = _client(world, cred)
    url = f"/api/v1/tenants/{world.a.slug}/quotas/{world.a_quota.pk}/"
    response = client.patch(url, {"api_key_id": world.b_key.pk, "user_id": world.b_dev.pk}, format="json")
    assert response.status_code in (200, 400)
    world.a_quota.refresh_from_db()
    assert (world.a_quota.api_key_id, world.a_quota.user_id, world.a_quota.tenant_id) == (None, None, world.a.pk)


@pytest.mark.parametrize("cred", CREDENTIALS)
def test_other_tenants_instance_under_own_deployment_is_not_found(world, cred):
    client = _client(world, cred)
    for action in ("drain", "restart"):
        url = "/api/v1/deployments/{dep}/instances/{instance}/" + action + "/"
        real = client.post(url.format(dep=world.a_deployment.pk, instance=world.b_instance.pk))
        ghost = client.post(url.format(dep=world.a_deployment.pk, instance=GHOST_ID))
        assert (real.status_code, real.content) == (ghost.status_code, ghost.content) and real.status_code == 404
    world.b_instance.refresh_from_db()
    assert world.b_instance.state == "ready"


@pytest.mark.parametrize("cred", CREDENTIALS)
def test_deploying_into_other_tenant_answers_like_a_missing_one(world, cred):
    client = _client(world, cred)
    body = {"name": "sneaky", "model_version": world.b_deployment.model_version_id, "runtime_backend": "simulator"}
    real = client.post("/api/v1/deployments/", {**body, "tenant": world.b.slug}, format="json")
    ghost = client.post("/api/v1/deployments/", {**body, "tenant": GHOST_SLUG}, format="json")
    assert real.status_code == 400 and (real.status_code, real.json()) == (ghost.status_code, ghost.json())
    assert not Deployment.objects.filter(name="sneaky").exists()


@pytest.mark.parametrize("cred", CREDENTIALS)
def test_fleet_and_usage_lists_hold_only_own_tenant(world, cred):
    client = _client(world, cred)
    deployments = client.get("/api/v1/deployments/").json()["results"]
    assert [d["tenant"] for d in deployments] == [world.a.slug]
    assert [r["tenant"] for r in client.get("/api/v1/usage/budgets").json()["rows"]] == []
    for path in ("/api/v1/deployments/", "/api/v1/usage/breakdown", "/api/v1/usage/costs", "/api/v1/usage/budgets",
                 f"/api/v1/tenants/{world.a.slug}/invitations/"):
        text = client.get(path).content.decode()
        assert not [m for m in _b_markers(world) + ["b's engine", "in-b@example.test"] if m in text], path
