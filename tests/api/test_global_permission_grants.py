"""Guardian and Django permissions: object grants widen one tenant, global grants widen nothing.

Scoping lives in tenants/access.py, which never consults model-level permissions, so a global
permission given by mistake (admin site, shell) must not let a member see another tenant.
"""
from types import SimpleNamespace

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from guardian.shortcuts import assign_perm

from apikeys.scopes import Scope
from audit.models import AuditEvent
from tenants.roles import Perm, Role
from tests.api.conftest import client_for
from tests.conftest import bearer
from tests.factories import make_key, make_member, make_user

CREDENTIALS = ["api_key", "session"]
MISTAKEN_GLOBAL_GRANTS = [
    ("tenants", "view_tenant_profile"), ("tenants", "view_tenant"), ("tenants", "view_audit"),
    ("tenants", "export_audit"), ("tenants", "manage_keys"), ("tenants", "view_keys"), ("tenants", "view_members"),
    ("tenants", "change_tenant"), ("apikeys", "view_apikey"), ("apikeys", "change_apikey"),
    ("audit", "view_auditevent"), ("quotas", "view_quotapolicy"),
    ("tenants", "view_fleet_internals"), ("tenants", "manage_fleet"), ("tenants", "view_registry_internals"),
    ("fleet", "view_deployment"), ("fleet", "change_deployment"),
]


def _perm(app_label, codename):
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)


@pytest.fixture
def dev_a(alice, bob):
    user = make_member(alice.tenant, Role.DEVELOPER, make_user("dev-a"))
    return SimpleNamespace(user=user, key=make_key(alice.tenant, user, role=Role.DEVELOPER).raw)


def test_normal_flows_leave_no_global_permissions(alice, bob, charlie):
    client, slug = bearer(alice.key), alice.tenant.slug
    client.post(f"/api/v1/tenants/{slug}/members/", {"email": "m@example.test", "role": "admin"}, format="json")
    member = make_member(alice.tenant, Role.ADMIN, make_user("m"))
    membership = client.get(f"/api/v1/tenants/{slug}/members/?role=admin").json()["results"][0]
    client.patch(f"/api/v1/tenants/{slug}/members/{membership['id']}/", {"role": "developer"}, format="json")
    key = client.post(f"/api/v1/tenants/{slug}/keys/", {"name": "k", "scopes": ["admin"]}, format="json")
    client.post(f"/api/v1/tenants/{slug}/keys/{key.json()['id']}/rotate/", {}, format="json")
    client.post(f"/api/v1/tenants/{slug}/quotas/", {"user_id": member.pk, "requests_per_minute": 3}, format="json")
    staff = client_for("session", charlie.user, None)
    fresh = {"slug": "fresh", "name": "Fresh", "admin_email": "o@fresh.test"}
    assert staff.post("/api/v1/tenants/", fresh, format="json").status_code == 201
    for user in get_user_model().objects.filter(is_superuser=False):
        assert not user.user_permissions.exists(), user
        assert not user.groups.exists(), user
        assert user.get_all_permissions() == set(), user


@pytest.mark.parametrize("cred", CREDENTIALS)
@pytest.mark.parametrize("app_label,codename", MISTAKEN_GLOBAL_GRANTS, ids=[c for _, c in MISTAKEN_GLOBAL_GRANTS])
def test_mistaken_global_grant_widens_nothing(alice, bob, dev_a, cred, app_label, codename):
    dev_a.user.user_permissions.add(_perm(app_label, codename))
    client = client_for(cred, get_user_model().objects.get(pk=dev_a.user.pk), dev_a.key)
    b = f"/api/v1/tenants/{bob.tenant.slug}"
    assert [t["slug"] for t in client.get("/api/v1/tenants/").json()["results"]] == [alice.tenant.slug]
    statuses = [client.get(path).status_code for path in (f"{b}/", f"{b}/members/", f"{b}/keys/", f"{b}/quotas/")]
    assert statuses == [404] * 4
    # A developer's role has no audit access: a global "view_audit" must not add any, in A or B.
    assert client.get("/api/v1/audit/events/").status_code == 403
    assert client.get(f"/api/v1/tenants/{alice.tenant.slug}/members/").status_code == 200
    assert client.patch(f"/api/v1/tenants/{alice.tenant.slug}/", {"name": "x"}, format="json").status_code == 403


@pytest.mark.parametrize("cred", CREDENTIALS)
def test_object_grant_on_own_tenant_reads_that_tenant_only(alice, bob, dev_a, cred):
    assign_perm(f"tenants.{Perm.VIEW_AUDIT}", dev_a.user, alice.tenant)
    client = client_for(cred, dev_a.user, dev_a.key)
    rows = client.get("/api/v1/audit/events/?page_size=200").json()["results"]
    assert rows and {row["tenant_id"] for row in rows} == {alice.tenant.pk}
    assert len(rows) == AuditEvent.objects.filter(tenant=alice.tenant).count()
    b_seq = AuditEvent.objects.filter(tenant=bob.tenant).first().seq
    assert client.get(f"/api/v1/audit/events/{b_seq}/").status_code == 404
    assert client.get(f"/api/v1/audit/events/?tenant={bob.tenant.slug}").json()["results"] == []
    assert client.get(f"/api/v1/tenants/{bob.tenant.slug}/").status_code == 404


def test_object_grant_stops_at_the_key_scope(alice, dev_a):
    """An audit grant cannot be used through a key without an admin-API scope."""
    assign_perm(f"tenants.{Perm.VIEW_AUDIT}", dev_a.user, alice.tenant)
    inference = make_key(alice.tenant, dev_a.user, role=Role.DEVELOPER, scopes=(Scope.INFERENCE,)).raw
    assert bearer(inference).get("/api/v1/audit/events/").status_code == 403


def test_object_grant_on_other_tenant_gives_a_non_member_nothing(alice, bob, dev_a):
    """Grants add to a member's role; they do not make someone a member of B."""
    assign_perm(f"tenants.{Perm.VIEW_AUDIT}", dev_a.user, bob.tenant)
    assign_perm(f"tenants.{Perm.VIEW_MEMBERS}", dev_a.user, bob.tenant)
    for client in (bearer(dev_a.key), client_for("session", dev_a.user, None)):
        assert client.get("/api/v1/audit/events/").status_code == 403  # no audit role anywhere
        assert client.get(f"/api/v1/tenants/{bob.tenant.slug}/members/").status_code == 404
