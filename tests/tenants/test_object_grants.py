"""Per-object grants with a write path: one member, one permission beyond their role, on one tenant —
granted and revoked over REST and in the console, audited, honoured by the read rules at once, never
more than the granter holds, never reaching another tenant."""
import pytest

from audit.models import AuditEvent
from tenants.roles import Role
from tests.api.conftest import console_login
from tests.conftest import bearer
from tests.factories import make_key, make_member, make_user


@pytest.fixture
def dev(alice):
    user = make_member(alice.tenant, Role.DEVELOPER, make_user("devin"))
    return user, make_key(alice.tenant, user, role=Role.DEVELOPER, name="devin admin key").raw


def test_a_grant_opens_the_audit_trail_to_one_developer_and_revoking_closes_it(alice, dev):
    user, key = dev
    assert bearer(key).get("/api/v1/audit/events/").status_code == 403
    grants = f"/api/v1/tenants/{alice.tenant.slug}/grants/"
    created = bearer(alice.key).post(grants, {"user_id": user.pk, "permission": "view_audit"}, format="json")
    assert created.status_code == 201 and created.json()["username"] == "devin"
    assert bearer(key).get("/api/v1/audit/events/").status_code == 200
    assert bearer(key).get("/api/v1/usage/budgets").status_code == 200  # the role's own reads are unchanged
    assert [g["permission"] for g in bearer(alice.key).get(grants).json()["results"]] == ["view_audit"]
    row = AuditEvent.objects.get(action="member.grant")
    assert row.after == {"user": "devin", "permission": "view_audit"} and row.tenant_id == alice.tenant.pk
    assert bearer(alice.key).delete(f"{grants}{created.json()['id']}/").status_code == 204
    assert bearer(key).get("/api/v1/audit/events/").status_code == 403
    assert AuditEvent.objects.filter(action="member.grant_revoke").count() == 1


def test_nobody_grants_what_they_do_not_hold_or_to_someone_above_them(alice, dev):
    user, key = dev
    grants = f"/api/v1/tenants/{alice.tenant.slug}/grants/"
    auditor_key = make_key(alice.tenant, make_member(alice.tenant, Role.AUDITOR, make_user("audra")),
                           role=Role.AUDITOR, name="audra").raw
    assert bearer(key).post(grants, {"user_id": user.pk, "permission": "view_audit"},
                            format="json").status_code == 403  # developers manage no members
    admin = make_member(alice.tenant, Role.ADMIN, make_user("adam"))
    admin_key = make_key(alice.tenant, admin, role=Role.ADMIN, name="adam").raw
    assert bearer(admin_key).post(grants, {"user_id": alice.user.pk, "permission": "view_audit"},
                                  format="json").status_code == 403  # the owner outranks an admin
    assert bearer(auditor_key).get(grants).status_code == 403
    assert bearer(alice.key).post(grants, {"user_id": 999999, "permission": "view_audit"},
                                  format="json").status_code == 400
    assert bearer(alice.key).post(grants, {"user_id": user.pk, "permission": "fly"}, format="json").status_code == 400


def test_grants_stay_in_their_tenant(alice, bob, dev):
    user, key = dev
    make_member(bob.tenant, Role.DEVELOPER, user)
    bearer(alice.key).post(f"/api/v1/tenants/{alice.tenant.slug}/grants/",
                           {"user_id": user.pk, "permission": "view_audit"}, format="json")
    b_key = make_key(bob.tenant, user, role=Role.DEVELOPER, name="devin in b").raw
    assert bearer(b_key).get("/api/v1/audit/events/").status_code == 403
    assert bearer(alice.key).get(f"/api/v1/tenants/{bob.tenant.slug}/grants/").status_code == 404
    assert bearer(bob.key).get(f"/api/v1/tenants/{bob.tenant.slug}/grants/").json()["results"] == []


def test_removing_a_member_removes_their_grants(alice, dev):
    user, _ = dev
    grants = f"/api/v1/tenants/{alice.tenant.slug}/grants/"
    bearer(alice.key).post(grants, {"user_id": user.pk, "permission": "view_audit"}, format="json")
    member = user.memberships.get(tenant=alice.tenant)
    assert bearer(alice.key).delete(f"/api/v1/tenants/{alice.tenant.slug}/members/{member.pk}/").status_code == 204
    assert bearer(alice.key).get(grants).json()["results"] == []


def test_the_console_grants_and_revokes(alice, dev):
    user, key = dev
    owner = console_login(alice.user)
    page = f"/console/tenants/{alice.tenant.slug}/"
    assert owner.post(f"{page}grants/new", {"member": user.pk, "permission": "view_audit"}).status_code == 302
    listing = owner.get(page).content.decode()
    assert "Per-object grants" in listing and "view_audit" in listing
    assert bearer(key).get("/api/v1/audit/events/").status_code == 200
    grant_id = AuditEvent.objects.get(action="member.grant").target_id
    assert owner.post(f"{page}grants/{grant_id}/revoke").status_code == 302
    assert bearer(key).get("/api/v1/audit/events/").status_code == 403
