"""Per-object grants on ONE deployment: granted and revoked by service, REST and console, audited in the
same transaction, honoured by the fleet's read and write rules — a member with only a grant sees exactly
that deployment — and never reaching another tenant (tenant B's admin gets 404 and cannot grant)."""
from types import SimpleNamespace

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction

from apikeys.scopes import Scope
from audit.actor import Actor
from audit.models import AuditEvent
from fleet.models import Deployment
from tenants import services
from tenants.object_grants import grants_on
from tenants.roles import Role
from tests.api.conftest import console_login
from tests.conftest import bearer
from tests.factories import make_key, make_member, make_user
from tests.models_registry.registry_helpers import make_version

SYSTEM = Actor.system("tests")


@pytest.fixture
def fleet(alice, bob):
    """Two deployments in A, one in B, a shared pool; an auditor of A (no fleet reads at all) with a key."""
    version = make_version()

    def deployment(tenant, name):
        return Deployment.objects.create(tenant=tenant, name=name, model_version=version, runtime_backend="simulator")

    auditor = make_member(alice.tenant, Role.AUDITOR, make_user("audra"))
    return SimpleNamespace(
        one=deployment(alice.tenant, "coder-one"), two=deployment(alice.tenant, "coder-two"),
        b=deployment(bob.tenant, "coder-b"), shared=deployment(None, "shared-pool"),
        auditor=auditor, auditor_key=make_key(alice.tenant, auditor, role=Role.AUDITOR, name="audra admin").raw,
    )


def _grants_url(deployment):
    return f"/api/v1/deployments/{deployment.pk}/grants/"


def _names(client, url="/api/v1/deployments/"):
    response = client.get(url)
    assert response.status_code == 200, response.content
    return sorted(row["name"] for row in response.json()["results"])


# --- services -------------------------------------------------------------------------------------------------


def test_grant_and_revoke_are_audited_in_the_same_transaction(fleet):
    grant = services.grant_object_permission(obj=fleet.one, user=fleet.auditor, perm="view_deployment", actor=SYSTEM)
    event = AuditEvent.objects.get(action="member.object_grant")
    assert event.tenant_id == fleet.one.tenant_id and event.target_id == str(grant.pk)
    assert event.after == {"user": "audra", "permission": "view_deployment", "object_type": "deployment",
                           "object_id": fleet.one.pk, "object": "tenant-a/coder-one"}
    # granting again changes and audits nothing
    again = services.grant_object_permission(obj=fleet.one, user=fleet.auditor, perm="view_deployment", actor=SYSTEM)
    assert again.pk == grant.pk and AuditEvent.objects.filter(action="member.object_grant").count() == 1
    services.revoke_object_permission(grant, actor=SYSTEM)
    assert not grants_on(fleet.one).exists()
    assert AuditEvent.objects.get(action="member.object_grant_revoke").before["permission"] == "view_deployment"


def test_a_failed_transaction_leaves_neither_grant_nor_event(fleet):
    with pytest.raises(RuntimeError), transaction.atomic():
        services.grant_object_permission(obj=fleet.one, user=fleet.auditor, perm="change_deployment", actor=SYSTEM)
        raise RuntimeError("rolled back")
    assert not grants_on(fleet.one).exists()
    assert not AuditEvent.objects.filter(action="member.object_grant").exists()


@pytest.mark.parametrize("perm,obj,field", [
    ("view_audit", "one", "permission"),  # a tenant permission is no deployment permission
    ("delete_deployment", "one", "permission"),
    ("view_deployment", "shared", "deployment"),  # a shared pool has no tenant, so no members
])
def test_the_service_refuses_bad_input(fleet, perm, obj, field):
    with pytest.raises(ValidationError) as caught:
        services.grant_object_permission(obj=getattr(fleet, obj), user=fleet.auditor, perm=perm, actor=SYSTEM)
    assert field in caught.value.message_dict


def test_only_members_of_the_objects_tenant_can_be_granted(fleet, bob):
    with pytest.raises(ValidationError) as caught:
        services.grant_object_permission(obj=fleet.one, user=bob.user, perm="view_deployment", actor=SYSTEM)
    assert "user_id" in caught.value.message_dict
    assert not AuditEvent.objects.filter(action="member.object_grant").exists()


# --- read and write rules -------------------------------------------------------------------------------------


def test_a_member_with_only_a_grant_sees_exactly_that_deployment(alice, fleet):
    client = bearer(fleet.auditor_key)
    assert client.get("/api/v1/deployments/").status_code == 403  # auditors read no fleet
    services.grant_object_permission(obj=fleet.one, user=fleet.auditor, perm="view_deployment", actor=SYSTEM)
    assert _names(client) == ["coder-one"]
    assert client.get(f"/api/v1/deployments/{fleet.one.pk}/").status_code == 200
    for other in (fleet.two, fleet.b, fleet.shared):
        assert client.get(f"/api/v1/deployments/{other.pk}/").status_code == 404
    # a view grant lets them look, not operate
    assert client.post(f"/api/v1/deployments/{fleet.one.pk}/scale/", {"max_replicas": 2},
                       format="json").status_code == 403
    # the console shows the same one deployment
    page = console_login(fleet.auditor).get("/console/fleet/").content.decode()
    assert "coder-one" in page and "coder-two" not in page and "coder-b" not in page


def test_engine_internals_stay_hidden_behind_a_view_grant(fleet):
    from fleet.models import Instance

    Instance.objects.create(deployment=fleet.one, state="ready", endpoint_url="http://127.0.0.1:9/", log_tail="x")
    services.grant_object_permission(obj=fleet.one, user=fleet.auditor, perm="view_deployment", actor=SYSTEM)
    instance = bearer(fleet.auditor_key).get(f"/api/v1/deployments/{fleet.one.pk}/").json()["instances"][0]
    assert instance["endpoint_url"] is None and instance["log_tail"] is None


def test_a_change_grant_operates_one_deployment_but_never_deletes_it(alice, fleet):
    dev = make_member(alice.tenant, Role.DEVELOPER, make_user("devin"))
    client = bearer(make_key(alice.tenant, dev, role=Role.DEVELOPER, name="devin admin").raw)
    scale = {"min_replicas": 0, "max_replicas": 2}
    assert client.post(f"/api/v1/deployments/{fleet.one.pk}/scale/", scale, format="json").status_code == 403
    services.grant_object_permission(obj=fleet.one, user=dev, perm="change_deployment", actor=SYSTEM)
    assert client.post(f"/api/v1/deployments/{fleet.one.pk}/scale/", scale, format="json").status_code == 200
    assert client.put(f"/api/v1/deployments/{fleet.one.pk}/routing/", {"routing_policy": "least_outstanding"},
                      format="json").status_code == 200
    assert client.post(f"/api/v1/deployments/{fleet.two.pk}/scale/", scale, format="json").status_code == 403
    assert client.delete(f"/api/v1/deployments/{fleet.one.pk}/").status_code == 403
    assert Deployment.objects.get(pk=fleet.one.pk).max_replicas == 2


def test_a_grant_counts_only_through_keys_whose_scopes_allow_it(alice, fleet):
    services.grant_object_permission(obj=fleet.one, user=fleet.auditor, perm="view_deployment", actor=SYSTEM)
    audit_key = make_key(alice.tenant, fleet.auditor, role=Role.AUDITOR, scopes=(Scope.AUDIT_READ,), name="ro").raw
    assert bearer(audit_key).get("/api/v1/deployments/").status_code == 403


def test_a_grant_never_reaches_through_a_key_of_another_tenant(alice, bob, fleet):
    make_member(bob.tenant, Role.AUDITOR, fleet.auditor)
    services.grant_object_permission(obj=fleet.one, user=fleet.auditor, perm="view_deployment", actor=SYSTEM)
    b_key = make_key(bob.tenant, fleet.auditor, role=Role.AUDITOR, name="audra in b").raw
    assert bearer(b_key).get("/api/v1/deployments/").status_code == 403


def test_removing_the_member_removes_their_object_grants(alice, fleet):
    services.grant_object_permission(obj=fleet.one, user=fleet.auditor, perm="view_deployment", actor=SYSTEM)
    membership = fleet.auditor.memberships.get(tenant=alice.tenant)
    services.remove_member(membership, actor=SYSTEM)
    assert not grants_on(fleet.one).exists()
    assert AuditEvent.objects.filter(action="member.object_grant_revoke").count() == 1


# --- REST API ---------------------------------------------------------------------------------------------------


def test_owner_lists_grants_and_revokes_over_rest(alice, fleet):
    owner = bearer(alice.key)
    created = owner.post(_grants_url(fleet.one), {"user_id": fleet.auditor.pk, "permission": "change_deployment"},
                         format="json")
    assert created.status_code == 201, created.content
    assert created.json() == {"id": created.json()["id"], "user_id": fleet.auditor.pk, "username": "audra",
                              "permission": "change_deployment"}
    listed = owner.get(_grants_url(fleet.one)).json()["results"]
    assert [(g["username"], g["permission"]) for g in listed] == [("audra", "change_deployment")]
    assert owner.get(_grants_url(fleet.two)).json()["results"] == []
    assert owner.get(f"{_grants_url(fleet.one)}{created.json()['id']}/").status_code == 200
    assert owner.get(f"{_grants_url(fleet.two)}{created.json()['id']}/").status_code == 404  # not this object's
    assert _names(bearer(fleet.auditor_key)) == ["coder-one"]
    assert owner.delete(f"{_grants_url(fleet.one)}{created.json()['id']}/").status_code == 204
    assert bearer(fleet.auditor_key).get("/api/v1/deployments/").status_code == 403
    assert list(AuditEvent.objects.filter(action__startswith="member.object_grant").values_list("action", flat=True)
                .order_by("seq")) == ["member.object_grant", "member.object_grant_revoke"]


@pytest.mark.parametrize("body,field", [
    ({"user_id": None, "permission": "view_deployment"}, "user_id"),
    ({"permission": "view_deployment"}, "user_id"),
    ({"user_id": 987654321, "permission": "view_deployment"}, "user_id"),
    ({"user_id": "x", "permission": "view_deployment"}, "user_id"),
    ({"user_id": 1}, "permission"),
    ({"user_id": 1, "permission": "view_audit"}, "permission"),
    ({"user_id": 1, "permission": "fly"}, "permission"),
])
def test_bad_input_is_a_400_naming_the_field(alice, fleet, body, field):
    body = {**body, "user_id": fleet.auditor.pk} if body.get("user_id") == 1 else body
    response = bearer(alice.key).post(_grants_url(fleet.one), body, format="json")
    assert response.status_code == 400 and field in response.json(), response.content


def test_a_non_member_cannot_be_granted_over_rest(alice, bob, fleet):
    response = bearer(alice.key).post(_grants_url(fleet.one), {"user_id": bob.user.pk, "permission": "view_deployment"},
                                      format="json")
    assert response.status_code == 400 and "user_id" in response.json()


def test_tenant_b_gets_404_on_as_deployment_grants_and_cannot_grant(alice, bob, fleet):
    grant = services.grant_object_permission(obj=fleet.one, user=fleet.auditor, perm="view_deployment", actor=SYSTEM)
    b_client = bearer(bob.key)
    body = {"user_id": bob.user.pk, "permission": "change_deployment"}
    for url in (_grants_url(fleet.one), f"{_grants_url(fleet.one)}{grant.pk}/"):
        for verb in ("GET", "POST", "DELETE"):
            real = b_client.generic(verb, url, "{}" if verb == "GET" else __import__("json").dumps(body),
                                    content_type="application/json")
            ghost = b_client.generic(verb, url.replace(f"/{fleet.one.pk}/", "/987654321/"), "{}",
                                     content_type="application/json")
            assert (real.status_code, ghost.status_code) in ((404, 404), (405, 405)), (verb, url, real.content)
    assert grants_on(fleet.one).count() == 1
    assert not grants_on(fleet.one).filter(user=bob.user).exists()


def test_who_may_not_manage_members_cannot_grant(alice, fleet):
    viewer = make_member(alice.tenant, Role.VIEWER, make_user("vic"))
    client = bearer(make_key(alice.tenant, viewer, role=Role.VIEWER, name="vic").raw)
    assert client.get(_grants_url(fleet.one)).status_code == 200  # viewers list members, so grants too
    assert client.post(_grants_url(fleet.one), {"user_id": fleet.auditor.pk, "permission": "view_deployment"},
                       format="json").status_code == 403
    # an auditor sees the deployment through a grant, but lists no members: the grants are not theirs to read
    services.grant_object_permission(obj=fleet.one, user=fleet.auditor, perm="view_deployment", actor=SYSTEM)
    assert bearer(fleet.auditor_key).get(_grants_url(fleet.one)).status_code == 403


def test_an_admin_cannot_grant_to_an_owner(alice, fleet):
    admin = make_member(alice.tenant, Role.ADMIN, make_user("adam"))
    client = bearer(make_key(alice.tenant, admin, role=Role.ADMIN, name="adam").raw)
    assert client.post(_grants_url(fleet.one), {"user_id": alice.user.pk, "permission": "view_deployment"},
                       format="json").status_code == 403
    assert client.post(_grants_url(fleet.one), {"user_id": fleet.auditor.pk, "permission": "view_deployment"},
                       format="json").status_code == 201


def test_platform_admin_gets_400_granting_on_a_shared_pool(charlie, fleet):
    from tests.api.conftest import client_for

    staff = client_for("session", charlie.user, None)
    assert staff.get(_grants_url(fleet.shared)).json()["results"] == []
    response = staff.post(_grants_url(fleet.shared), {"user_id": fleet.auditor.pk, "permission": "view_deployment"},
                          format="json")
    assert response.status_code == 400 and "deployment" in response.json()


# --- console ----------------------------------------------------------------------------------------------------


def test_the_console_form_grants_and_revokes_with_csrf(alice, fleet):
    owner = console_login(alice.user)  # enforces CSRF: the token travels as a browser's would
    page = owner.get(f"/console/fleet/{fleet.one.pk}/").content.decode()
    assert "Per-object grants" in page and 'name="csrfmiddlewaretoken"' in page
    assert '<label for="id_member">' in page and '<label for="id_permission">' in page  # labelled, keyboard-usable
    response = owner.post(f"/console/fleet/{fleet.one.pk}/grants/new",
                          {"member": fleet.auditor.pk, "permission": "view_deployment"})
    assert response.status_code == 302
    grant = grants_on(fleet.one).get()
    assert "audra" in owner.get(f"/console/fleet/{fleet.one.pk}/").content.decode()
    assert "coder-one" in console_login(fleet.auditor).get(f"/console/fleet/{fleet.one.pk}/").content.decode()
    assert owner.post(f"/console/fleet/{fleet.one.pk}/grants/{grant.pk}/revoke").status_code == 302
    assert not grants_on(fleet.one).exists()
    assert console_login(fleet.auditor).get(f"/console/fleet/{fleet.one.pk}/").status_code == 404


def test_the_console_refuses_without_csrf_and_for_other_tenants(alice, bob, fleet):
    from django.test import Client

    no_csrf = Client(enforce_csrf_checks=True)
    no_csrf.force_login(alice.user)
    assert no_csrf.post(f"/console/fleet/{fleet.one.pk}/grants/new",
                        {"member": fleet.auditor.pk, "permission": "view_deployment"}).status_code == 403
    b_owner = console_login(bob.user)
    assert b_owner.post(f"/console/fleet/{fleet.one.pk}/grants/new",
                        {"member": bob.user.pk, "permission": "view_deployment"}).status_code == 404
    assert b_owner.get(f"/console/fleet/{fleet.one.pk}/").status_code == 404
    assert not grants_on(fleet.one).exists()


def test_the_console_form_reports_bad_input(alice, fleet):
    owner = console_login(alice.user)
    response = owner.post(f"/console/fleet/{fleet.one.pk}/grants/new",
                          {"member": fleet.auditor.pk, "permission": "view_audit"}, follow=True)
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not grants_on(fleet.one).exists()


def test_bs_grant_id_under_as_own_deployment_is_not_found(alice, bob, fleet):
    b_member = make_member(bob.tenant, Role.VIEWER, make_user("bvic"))
    b_grant = services.grant_object_permission(obj=fleet.b, user=b_member, perm="view_deployment", actor=SYSTEM)
    owner = bearer(alice.key)
    for verb in ("GET", "DELETE"):
        real = owner.generic(verb, f"{_grants_url(fleet.one)}{b_grant.pk}/")
        ghost = owner.generic(verb, f"{_grants_url(fleet.one)}987654321/")
        assert real.status_code == ghost.status_code == 404 and real.content == ghost.content
    assert grants_on(fleet.b).count() == 1
