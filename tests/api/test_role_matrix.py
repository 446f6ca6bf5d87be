"""Role matrix: what each tenant role may do over the REST API, mirrored from tenants/roles.py.

`PERMISSIONS` restates ROLE_PERMISSIONS (a change there must be a deliberate change here too);
`EXPECTED` is the behaviour users see: one row per action, one column per role.
"""
from types import SimpleNamespace

import pytest

from apikeys.models import ApiKey
from apikeys.scopes import Scope
from audit.actor import Actor
from quotas.models import QuotaPolicy
from quotas.services import create_quota_policy
from tenants.models import Membership, Tenant
from tenants.roles import ROLE_PERMISSIONS, Perm, Role
from tests.api.conftest import client_for, snapshot_tenant
from tests.conftest import bearer
from tests.factories import make_key, make_member, make_user

ROLES = [Role.OWNER, Role.ADMIN, Role.DEVELOPER, Role.AUDITOR, Role.VIEWER]
P = Perm
PERMISSIONS = {
    Role.OWNER: set(Perm.values),
    Role.ADMIN: set(Perm.values),
    Role.DEVELOPER: {P.VIEW_TENANT, P.VIEW_MEMBERS, P.MANAGE_OWN_KEYS, P.VIEW_QUOTAS},
    Role.AUDITOR: {P.VIEW_TENANT, P.VIEW_AUDIT, P.EXPORT_AUDIT},
    Role.VIEWER: {P.VIEW_TENANT, P.VIEW_MEMBERS, P.VIEW_KEYS, P.VIEW_QUOTAS},
}

ROWS, EMPTY = "200 with A's rows", "200 and empty"  # audit reads are scoped lists, not 403s
EXPECTED = {
    #  action                    owner  admin  developer auditor viewer
    "view_tenant":              (200,   200,   200,      200,    200),
    "rename_tenant":            (200,   200,   403,      403,    403),
    "list_members":             (200,   200,   200,      403,    200),
    "add_member":               (201,   201,   403,      403,    403),
    "change_member":            (200,   200,   403,      403,    403),
    "remove_member":            (204,   204,   403,      403,    403),
    "list_keys":                (200,   200,   200,      403,    200),
    "view_others_key":          (200,   200,   404,      403,    200),
    "create_key_for_other":     (403,   403,   403,      403,    403),  # personal keys: owner mints them
    "create_own_inference_key": (201,   201,   201,      403,    403),
    "revoke_own_key":           (200,   200,   200,      403,    403),
    "rotate_own_key":           (201,   201,   201,      403,    403),
    "revoke_others_key":        (200,   200,   404,      403,    403),
    "rotate_others_key":        (201,   201,   404,      403,    403),
    "list_quotas":              (200,   200,   200,      403,    200),
    "create_quota":             (201,   201,   403,      403,    403),
    "change_quota":             (200,   200,   403,      403,    403),
    "delete_quota":             (204,   204,   403,      403,    403),
    "list_audit":               (ROWS,  ROWS,  EMPTY,    ROWS,   EMPTY),
    "export_audit":             (ROWS,  ROWS,  403,      ROWS,   403),
    "view_audit_event":         (200,   200,   404,      200,    404),
    # platform-only
    "verify_audit_chain":       (403,   403,   403,      403,    403),
    "create_tenant":            (403,   403,   403,      403,    403),
    "suspend_tenant":           (403,   403,   403,      403,    403),
    "activate_tenant":          (403,   403,   403,      403,    403),
    "delete_tenant":            (403,   403,   403,      403,    403),
}


def test_role_permission_table_is_the_documented_one():
    assert {role: set(perms) for role, perms in ROLE_PERMISSIONS.items()} == PERMISSIONS


def _inference_key(tenant, user, name):
    return make_key(tenant, user, role=Role.DEVELOPER, scopes=(Scope.INFERENCE,), name=name).api_key


@pytest.fixture
def team(alice):
    """Tenant A with a second owner, targets for every write, and one inference key per person."""
    tenant = alice.tenant
    make_member(tenant, Role.OWNER, make_user("owner2"))
    target_dev = make_member(tenant, Role.DEVELOPER, make_user("target-dev"))
    target_viewer = make_member(tenant, Role.VIEWER, make_user("target-viewer"))
    key_holder = make_member(tenant, Role.DEVELOPER, make_user("key-holder"))
    system = Actor.system("tests")
    return SimpleNamespace(
        alice=alice, tenant=tenant, system=system,
        target_dev=Membership.objects.get(tenant=tenant, user=target_dev),
        target_viewer=Membership.objects.get(tenant=tenant, user=target_viewer),
        others_keys=[_inference_key(tenant, key_holder, "theirs 1"), _inference_key(tenant, key_holder, "theirs 2")],
        user_quota=create_quota_policy(tenant=tenant, user=target_viewer, requests_per_minute=9, actor=system),
        tenant_quota=QuotaPolicy.objects.get(tenant=tenant, api_key=None, user=None),
        a_event=tenant_event_seq(tenant),
    )


def tenant_event_seq(tenant):
    from audit.models import AuditEvent

    return AuditEvent.objects.filter(tenant=tenant).values_list("seq", flat=True).first()


def actor_in(team, role):
    """A member of A with `role`, their admin-scoped key (capped at the role), and two own keys."""
    user = team.alice.user if role == Role.OWNER else make_member(team.tenant, role, make_user(f"acting-{role}"))
    raw = make_key(team.tenant, user, role=role, name=f"{role} admin key").raw
    own = [_inference_key(team.tenant, user, "mine 1"), _inference_key(team.tenant, user, "mine 2")]
    return SimpleNamespace(user=user, raw=raw, own_keys=own)


def _audit_outcome(response, tenant, rows):
    if response.status_code != 200:
        return response.status_code
    if not rows:
        return EMPTY
    return ROWS if {r["tenant_id"] for r in rows} == {tenant.pk} else f"rows of other tenants: {rows}"


def _export_outcome(response, tenant):
    if response.status_code != 200:
        return response.status_code
    lines = [line for line in b"".join(response.streaming_content).decode().splitlines() if line]
    if not lines:
        return EMPTY
    return ROWS if all(f'"tenant_slug":"{tenant.slug}"' in line for line in lines) else "rows of other tenants"


def run_actions(client, team, me) -> dict:
    """Perform every action once, in an order where no action's target is another's."""
    t = f"/api/v1/tenants/{team.tenant.slug}"
    other_key_1, other_key_2 = team.others_keys
    own_1, own_2 = me.own_keys
    calls = {
        "view_tenant": lambda: client.get(f"{t}/"),
        "rename_tenant": lambda: client.patch(f"{t}/", {"name": "Renamed"}, format="json"),
        "list_members": lambda: client.get(f"{t}/members/"),
        "add_member": lambda: client.post(f"{t}/members/", {"email": "new@example.test", "role": "viewer"}, format="json"),
        "change_member": lambda: client.patch(f"{t}/members/{team.target_dev.pk}/", {"role": "viewer"}, format="json"),
        "remove_member": lambda: client.delete(f"{t}/members/{team.target_viewer.pk}/"),
        "list_keys": lambda: client.get(f"{t}/keys/"),
        "view_others_key": lambda: client.get(f"{t}/keys/{other_key_1.pk}/"),
        "create_key_for_other": lambda: client.post(f"{t}/keys/", {
            "name": "for dev", "scopes": ["admin"], "user_id": team.target_dev.user_id}, format="json"),
        "create_own_inference_key": lambda: client.post(f"{t}/keys/", {"name": "ide", "scopes": ["inference"]}, format="json"),
        "revoke_own_key": lambda: client.post(f"{t}/keys/{own_1.pk}/revoke/"),
        "rotate_own_key": lambda: client.post(f"{t}/keys/{own_2.pk}/rotate/", {}, format="json"),
        "revoke_others_key": lambda: client.post(f"{t}/keys/{other_key_1.pk}/revoke/"),
        "rotate_others_key": lambda: client.post(f"{t}/keys/{other_key_2.pk}/rotate/", {}, format="json"),
        "list_quotas": lambda: client.get(f"{t}/quotas/"),
        "create_quota": lambda: client.post(f"{t}/quotas/", {"user_id": team.target_dev.user_id,
                                                             "requests_per_minute": 5}, format="json"),
        "change_quota": lambda: client.patch(f"{t}/quotas/{team.tenant_quota.pk}/", {"tokens_per_minute": 1000}, format="json"),
        "delete_quota": lambda: client.delete(f"{t}/quotas/{team.user_quota.pk}/"),
        "view_audit_event": lambda: client.get(f"/api/v1/audit/events/{team.a_event}/"),
        "verify_audit_chain": lambda: client.get("/api/v1/audit/verify"),
        "create_tenant": lambda: client.post("/api/v1/tenants/", {"slug": "fresh", "name": "Fresh"}, format="json"),
        "suspend_tenant": lambda: client.post(f"{t}/suspend/"),
        "activate_tenant": lambda: client.post(f"{t}/activate/"),
        "delete_tenant": lambda: client.delete(f"{t}/"),
    }
    observed = {name: call().status_code for name, call in calls.items()}
    audit = client.get("/api/v1/audit/events/?page_size=200")
    observed["list_audit"] = _audit_outcome(audit, team.tenant, audit.json().get("results", []))
    observed["export_audit"] = _export_outcome(client.get("/api/v1/audit/export"), team.tenant)
    return observed


@pytest.mark.parametrize("cred", ["api_key", "session"])
@pytest.mark.parametrize("role", ROLES)
def test_role_matrix(team, role, cred):
    me = actor_in(team, role)
    client = client_for(cred, me.user, me.raw)
    observed = run_actions(client, team, me)
    column = ROLES.index(role)
    expected = {action: row[column] for action, row in EXPECTED.items()}
    assert observed == expected
    assert Tenant.objects.filter(pk=team.tenant.pk, status="active").exists()
    assert not Tenant.objects.filter(slug="fresh").exists()


def test_platform_staff_perform_platform_actions(alice, charlie):
    from tests.api.conftest import console_login

    client = console_login(charlie.user)
    assert client.post("/api/v1/tenants/", {"slug": "fresh", "name": "Fresh"}, format="json").status_code == 201
    assert client.post("/api/v1/tenants/fresh/suspend/").json()["status"] == "suspended"
    assert client.post("/api/v1/tenants/fresh/activate/").json()["status"] == "active"
    assert client.get("/api/v1/audit/verify").json()["ok"] is True
    assert client.delete("/api/v1/tenants/fresh/").status_code == 204
    assert not Tenant.objects.filter(slug="fresh").exists()


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
    invite = admin_of_a.client.post(f"{admin_of_a.url}/members/", {"email": "boss@example.test", "role": "owner"}, format="json")
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
    response = admin_of_a.client.post(f"{admin_of_a.url}/keys/", {"name": "x", "scopes": ["admin"], "role": "owner"}, format="json")
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
    assert (invitation.tenant_id, invitation.email, invitation.status) == (alice.tenant.pk, "new@example.test", "pending")
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
    assert (key.user_id, key.scopes, key.role, key.tenant_id) == (developer.user.pk, ["inference"], "developer", alice.tenant.pk)


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
