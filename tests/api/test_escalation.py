"""Escalation and mass assignment: nobody grants above their own role or edits a higher-ranked member,
fields a caller may not set are ignored or refused, developers mint only their own inference keys, and
auditors read the audit trail and nothing else. (What each role may do on every route: test_role_matrix.)"""
from types import SimpleNamespace

import pytest
from django.core.exceptions import ValidationError

from apikeys.models import ApiKey
from apikeys.scopes import Scope
from tenants.models import Membership, Tenant
from tenants.roles import Role
from tests.api.conftest import client_for, snapshot_tenant
from tests.conftest import bearer
from tests.factories import make_key, make_member, make_user

# --- escalation: nobody grants above their own role or edits a higher-ranked member ---

@pytest.fixture
def admin_of_a(alice):
    user = make_member(alice.tenant, Role.ADMIN, make_user("admin-a"))
    return SimpleNamespace(user=user, client=bearer(make_key(alice.tenant, user, role=Role.ADMIN).raw),
                           url=f"/api/v1/tenants/{alice.tenant.slug}")


def _membership(tenant, user):
    return Membership.objects.get(tenant=tenant, user=user)


def test_admin_cannot_make_anyone_owner(alice, admin_of_a):
    dev = make_member(alice.tenant, Role.DEVELOPER)
    before = snapshot_tenant(alice.tenant)
    invite = admin_of_a.client.post(f"{admin_of_a.url}/members/", {"email": "boss@example.test", "role": "owner"},
                                    format="json")
    promote = admin_of_a.client.patch(f"{admin_of_a.url}/members/{_membership(alice.tenant, dev).pk}/",
                                      {"role": "owner"}, format="json")
    promote_self = admin_of_a.client.patch(f"{admin_of_a.url}/members/{_membership(alice.tenant, admin_of_a.user).pk}/",
                                           {"role": "owner"}, format="json")
    assert (invite.status_code, promote.status_code, promote_self.status_code) == (403, 403, 403)
    assert snapshot_tenant(alice.tenant) == before


def test_admin_cannot_demote_or_remove_an_owner(alice, admin_of_a):
    owner = _membership(alice.tenant, alice.user)
    before = snapshot_tenant(alice.tenant)
    demote = admin_of_a.client.patch(f"{admin_of_a.url}/members/{owner.pk}/", {"role": "viewer"}, format="json")
    remove = admin_of_a.client.delete(f"{admin_of_a.url}/members/{owner.pk}/")
    assert (demote.status_code, remove.status_code) == (403, 403)
    assert snapshot_tenant(alice.tenant) == before


def test_admin_cannot_rotate_or_revoke_an_owner_key(alice, admin_of_a):
    """Rotating the owner's key would hand the admin a fresh owner-role credential."""
    owner_key = ApiKey.objects.get(tenant=alice.tenant, user=alice.user)
    before = snapshot_tenant(alice.tenant)
    rotate = admin_of_a.client.post(f"{admin_of_a.url}/keys/{owner_key.pk}/rotate/", {}, format="json")
    revoke = admin_of_a.client.post(f"{admin_of_a.url}/keys/{owner_key.pk}/revoke/")
    delete = admin_of_a.client.delete(f"{admin_of_a.url}/keys/{owner_key.pk}/")
    assert (rotate.status_code, revoke.status_code, delete.status_code) == (403, 403, 403)
    assert "key" not in rotate.json()
    assert snapshot_tenant(alice.tenant) == before


def test_admin_cannot_mint_key_above_own_role(alice, admin_of_a):
    before = snapshot_tenant(alice.tenant)
    response = admin_of_a.client.post(f"{admin_of_a.url}/keys/", {"name": "x", "scopes": ["admin"], "role": "owner"},
                                      format="json")
    assert response.status_code == 403
    assert snapshot_tenant(alice.tenant) == before


@pytest.mark.parametrize("cred", ["api_key", "session"])
def test_last_owner_cannot_leave_or_step_down(alice, cred):
    client = client_for(cred, alice.user, alice.key)
    url = f"/api/v1/tenants/{alice.tenant.slug}/members/{_membership(alice.tenant, alice.user).pk}/"
    before = snapshot_tenant(alice.tenant)
    leave, step_down = client.delete(url), client.patch(url, {"role": "admin"}, format="json")
    assert (leave.status_code, step_down.status_code) == (400, 400)
    assert "role" in leave.json() and "role" in step_down.json()
    assert snapshot_tenant(alice.tenant) == before


def test_an_owner_may_leave_when_another_owner_remains(alice):
    make_member(alice.tenant, Role.OWNER)
    url = f"/api/v1/tenants/{alice.tenant.slug}/members/{_membership(alice.tenant, alice.user).pk}/"
    assert bearer(alice.key).delete(url).status_code == 204
    assert not ApiKey.objects.usable().filter(user=alice.user).exists()  # leaving revokes their keys


# --- mass assignment: fields a caller may not set are ignored or refused, and nothing changes ---

@pytest.mark.parametrize("field,value", [
    ("status", "suspended"), ("slug", "renamed"), ("isolation", "dedicated"), ("region", "mars-1"),
    ("id", 999), ("created_at", "2001-01-01T00:00:00Z"),
])
def test_tenant_admin_cannot_patch_platform_fields(alice, admin_of_a, field, value):
    before = snapshot_tenant(alice.tenant)
    response = admin_of_a.client.patch(f"{admin_of_a.url}/", {field: value}, format="json")
    assert response.status_code in (200, 400, 403)
    assert snapshot_tenant(alice.tenant) == before
    assert Tenant.objects.filter(slug="tenant-a").exists()


def test_key_body_cannot_choose_tenant_or_secret_fields(alice, bob, admin_of_a):
    response = admin_of_a.client.post(f"{admin_of_a.url}/keys/", {
        "name": "sneaky", "scopes": ["inference"], "tenant": bob.tenant.pk, "tenant_id": bob.tenant.pk,
        "prefix": "sy_live_chosen00", "key_hash": "0" * 64, "revoked_at": None, "created_by": alice.user.pk,
        "expires_at": None, "rotated_from": 1}, format="json")
    assert response.status_code == 201, response.content
    key = ApiKey.objects.get(pk=response.json()["id"])
    assert (key.tenant_id, key.created_by_id, key.rotated_from_id) == (alice.tenant.pk, admin_of_a.user.pk, None)
    assert key.prefix != "sy_live_chosen00" and key.key_hash != "0" * 64
    assert not ApiKey.objects.filter(tenant=bob.tenant, name="sneaky").exists()


def test_member_body_cannot_choose_tenant_or_user_flags(alice, bob, admin_of_a):
    from tenants.models import Invitation

    response = admin_of_a.client.post(f"{admin_of_a.url}/members/", {
        "email": "new@example.test", "role": "viewer", "tenant": bob.tenant.pk, "is_staff": True,
        "is_superuser": True, "user_id": bob.user.pk, "status": "accepted"}, format="json")
    assert response.status_code == 201, response.content
    invitation = Invitation.objects.get(pk=response.json()["id"])
    assert (invitation.tenant_id, invitation.email, invitation.status) == (alice.tenant.pk, "new@example.test",
                                                                           "pending")
    assert not Membership.objects.filter(user=bob.user, tenant=alice.tenant).exists()
    assert not Invitation.objects.filter(tenant=bob.tenant).exists()


def test_member_patch_changes_only_the_role(alice, bob, admin_of_a):
    dev = _membership(alice.tenant, make_member(alice.tenant, Role.DEVELOPER))
    response = admin_of_a.client.patch(f"{admin_of_a.url}/members/{dev.pk}/", {
        "role": "viewer", "tenant": bob.tenant.pk, "user_id": bob.user.pk, "user": bob.user.pk}, format="json")
    assert response.status_code == 200, response.content
    dev.refresh_from_db()
    assert (dev.role, dev.tenant_id, dev.user_id) == ("viewer", alice.tenant.pk, dev.user_id)
    assert dev.user_id != bob.user.pk


# --- developers: self-service inference keys only ---

@pytest.fixture
def developer(alice):
    user = make_member(alice.tenant, Role.DEVELOPER, make_user("dev-a"))
    return SimpleNamespace(user=user, client=bearer(make_key(alice.tenant, user, role=Role.DEVELOPER).raw),
                           url=f"/api/v1/tenants/{alice.tenant.slug}/keys/")


@pytest.mark.parametrize("body", [
    {"name": "x", "scopes": ["admin"]},
    {"name": "x", "scopes": ["audit:read"]},
    {"name": "x", "scopes": ["inference", "admin"]},
    {"name": "x", "scopes": ["inference"], "role": "owner"},
    {"name": "x", "scopes": ["inference"], "role": "admin"},
], ids=["admin", "audit-read", "inference+admin", "role-owner", "role-admin"])
def test_developer_cannot_mint_beyond_own_inference_key(alice, developer, body):
    before = snapshot_tenant(alice.tenant)
    assert developer.client.post(developer.url, body, format="json").status_code == 403
    assert snapshot_tenant(alice.tenant) == before


def test_developer_cannot_mint_a_key_for_someone_else(alice, developer):
    before = snapshot_tenant(alice.tenant)
    body = {"name": "x", "scopes": ["inference"], "user_id": alice.user.pk}
    assert developer.client.post(developer.url, body, format="json").status_code == 403
    assert snapshot_tenant(alice.tenant) == before


def test_developer_mints_own_inference_key(alice, developer):
    response = developer.client.post(developer.url, {"name": "ide", "scopes": ["inference"]}, format="json")
    assert response.status_code == 201, response.content
    key = ApiKey.objects.get(pk=response.json()["id"])
    assert (key.user_id, key.scopes, key.role, key.tenant_id) == (developer.user.pk, ["inference"], "developer",
                                                                  alice.tenant.pk)


def test_developer_lists_only_own_keys(alice, developer):
    ids = {row["id"] for row in developer.client.get(developer.url).json()["results"]}
    assert ids == set(ApiKey.objects.filter(user=developer.user).values_list("pk", flat=True))


# --- auditors: read and export the audit trail, nothing else ---

def test_auditor_reads_and_exports_audit_only(alice):
    user = make_member(alice.tenant, Role.AUDITOR, make_user("auditor-a"))
    client = bearer(make_key(alice.tenant, user, role=Role.AUDITOR, scopes=(Scope.AUDIT_READ,)).raw)
    t = f"/api/v1/tenants/{alice.tenant.slug}"
    assert client.get("/api/v1/audit/events/").json()["results"]
    assert client.get("/api/v1/audit/export?format=csv").status_code == 200
    assert client.get("/api/v1/audit/export/manifest").json()["row_count"] > 0
    before = snapshot_tenant(alice.tenant)
    denied = [client.get(f"{t}/members/"), client.get(f"{t}/keys/"), client.get(f"{t}/quotas/"),
              client.patch(f"{t}/", {"name": "x"}, format="json"),
              client.post(f"{t}/keys/", {"name": "x", "scopes": ["inference"]}, format="json"),
              client.post(f"{t}/members/", {"email": "x@example.test", "role": "viewer"}, format="json")]
    assert [r.status_code for r in denied] == [403] * len(denied)
    assert snapshot_tenant(alice.tenant) == before


# --- the fleet, registry and usage: explicit read permissions (docs/roles.md) ---

@pytest.fixture
def deployment(alice):
    from django.utils import timezone

    from fleet.models import Deployment, Instance
    from tests.models_registry.registry_helpers import make_version

    version = make_version()
    dep = Deployment.objects.create(tenant=alice.tenant, name="coder", model_version=version,
                                    runtime_backend="simulator")
    Instance.objects.create(deployment=dep, state="ready", endpoint_url="http://127.0.0.1:9", ready_at=timezone.now(),
                            runtime_handle={"pid": 4242}, log_tail="INFO prompt: 'def secret_sauce():'")
    return dep


@pytest.mark.parametrize("scopes,role", [((Scope.AUDIT_READ,), Role.OWNER), ((Scope.AUDIT_READ,), Role.AUDITOR),
                                         ((Scope.ADMIN,), Role.AUDITOR)], ids=["owner-audit-key", "auditor-audit-key",
                                                                                "auditor-admin-key"])
def test_an_audit_key_reads_no_fleet_registry_or_usage(alice, deployment, scopes, role):
    user = alice.user if role == Role.OWNER else make_member(alice.tenant, role, make_user("auditor-a"))
    client = bearer(make_key(alice.tenant, user, role=role, scopes=scopes).raw)
    paths = ["/api/v1/deployments/", f"/api/v1/deployments/{deployment.pk}/", "/api/v1/models/",
             f"/api/v1/models/{deployment.model_version.model_id}/versions/", "/api/v1/usage/series",
             "/api/v1/usage/costs", "/api/v1/usage/budgets", "/api/v1/usage/gpu-prices/"]
    answers = {path: client.get(path) for path in paths}
    assert {path: r.status_code for path, r in answers.items()} == dict.fromkeys(paths, 403)
    assert not any(b"secret_sauce" in r.content for r in answers.values())
    scale = client.post(f"/api/v1/deployments/{deployment.pk}/scale/", {"max_replicas": 4}, format="json")
    assert scale.status_code == 403  # an owner's audit:read key manages nothing either


@pytest.mark.parametrize("role", [Role.DEVELOPER, Role.VIEWER])
def test_developers_and_viewers_see_the_fleet_without_engine_internals(alice, deployment, role):
    user = make_member(alice.tenant, role, make_user(f"{role}-a"))
    client = bearer(make_key(alice.tenant, user, role=role).raw)
    body = client.get(f"/api/v1/deployments/{deployment.pk}/").json()
    [instance] = body["instances"]
    assert instance["state"] == "ready" and body["name"] == "coder"
    assert {k: instance[k] for k in ("log_tail", "pid", "endpoint_url", "port", "failure_reason",
                                     "last_health_error")} == dict.fromkeys(
        ("log_tail", "pid", "endpoint_url", "port", "failure_reason", "last_health_error"))
    version = client.get(f"/api/v1/models/{deployment.model_version.model_id}/versions/").json()["results"][0]
    assert version["artifact_uri"] is None and version["engine_args"] is None and version["version"] == "v1"


def test_owners_see_engine_internals(alice, deployment):
    [instance] = bearer(alice.key).get(f"/api/v1/deployments/{deployment.pk}/").json()["instances"]
    assert instance["pid"] == 4242 and "secret_sauce" in instance["log_tail"]


def test_a_staff_members_tenant_less_key_is_a_platform_key_only_with_the_admin_scope(alice, charlie):
    """Platform powers ignore key scopes, so a narrow (audit:read) tenant-less key must not carry them."""
    with pytest.raises(ValidationError):  # no longer minted; one made before that rule still acts as nobody
        make_key(None, charlie.user, scopes=(Scope.AUDIT_READ,), name="narrow platform key")
    narrow_key = make_key(None, charlie.user, scopes=(Scope.ADMIN,), name="narrow platform key")
    ApiKey.objects.filter(pk=narrow_key.api_key.pk).update(scopes=[Scope.AUDIT_READ])
    narrow = narrow_key.raw
    broad = make_key(None, charlie.user, scopes=(Scope.ADMIN,), name="platform key").raw
    create = {"slug": "fresh", "name": "Fresh", "admin_email": "owner@fresh.test"}
    assert bearer(narrow).post("/api/v1/tenants/", create, format="json").status_code == 403
    assert bearer(narrow).get("/api/v1/deployments/").status_code == 403
    assert bearer(narrow).get(f"/api/v1/tenants/{alice.tenant.slug}/").status_code == 404
    assert bearer(broad).post("/api/v1/tenants/", create, format="json").status_code == 201
    assert bearer(broad).get("/api/v1/audit/verify").json()["ok"] is True
