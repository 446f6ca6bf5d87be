"""SCIM 2.0 provisioning with the protocol's documented request shapes (RFC 7643 §8, RFC 7644 §3):
users created, found by filter, updated and deactivated; groups pushed and patched become tenant roles;
deactivating ends the user's session and revokes their personal keys at once; each provider sees only
what it provisioned."""
import json

import pytest
from django.test import Client

from apikeys.models import ApiKey
from audit.models import AuditEvent
from tenants.models import Membership
from tests.conftest import bearer
from tests.factories import make_key

TOKEN, OTHER_TOKEN = "scim-token-of-okta-0123456789", "scim-token-of-entra-0123456789"
SCIM = "application/scim+json"


@pytest.fixture(autouse=True)
def scim_providers(settings):
    common = {"client_id": "c", "client_secret": "s"}
    settings.SWITCHYARD_OIDC_PROVIDERS = {
        "okta": {"label": "Okta", "issuer": "https://okta.example/oauth2/default", "scim_token": TOKEN, **common},
        "entra": {"label": "Entra", "issuer": "https://entra.example/v2.0", "scim_token": OTHER_TOKEN, **common}}


def scim(method, path, body=None, token=TOKEN):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.generic(method, f"/scim/v2/{path}", json.dumps(body) if body is not None else "", content_type=SCIM)


def create_user(name="bjensen", external_id="00u1"):
    response = scim("POST", "Users", {  # RFC 7643 §8.1, the minimal user
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": name, "externalId": external_id,
        "name": {"givenName": "Barbara", "familyName": "Jensen"},
        "emails": [{"value": f"{name}@example.com", "type": "work", "primary": True}], "active": True})
    assert response.status_code == 201, response.content
    assert response["Content-Type"] == SCIM
    return response.json()


def test_a_token_is_required(db):
    assert Client().get("/scim/v2/Users").status_code == 401
    response = scim("GET", "Users", token="wrong")
    assert response.status_code == 401 and response.json()["schemas"] == ["urn:ietf:params:scim:api:messages:2.0:Error"]


def test_users_are_created_found_and_replaced(db):
    created = create_user()
    assert created["userName"] == "bjensen" and created["active"] is True
    assert created["emails"] == [{"value": "bjensen@example.com", "primary": True}]
    found = scim("GET", 'Users?filter=userName eq "bjensen"').json()
    assert found["totalResults"] == 1 and found["Resources"][0]["id"] == created["id"]
    assert scim("GET", 'Users?filter=userName eq "nobody"').json()["totalResults"] == 0
    assert scim("POST", "Users", {"userName": "bjensen", "emails": []}).status_code == 409
    replaced = scim("PUT", f"Users/{created['id']}", {"schemas": [], "userName": "bjensen", "externalId": "00u1",
                                                        "emails": [{"value": "b.jensen@example.com", "primary": True}],
                                                        "active": True}).json()
    assert replaced["emails"][0]["value"] == "b.jensen@example.com"
    assert AuditEvent.objects.filter(action__in=["scim.user_create", "scim.user_update"]).count() == 2


def test_groups_become_roles_and_patches_follow(alice):
    user = create_user()
    group = scim("POST", "Groups", {"schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
                                    "displayName": f"switchyard:{alice.tenant.slug}:developer",
                                    "members": [{"value": user["id"]}]})
    assert group.status_code == 201 and group.json()["members"][0]["value"] == user["id"]
    assert Membership.objects.get(tenant=alice.tenant, user_id=user["id"]).role == "developer"
    renamed = scim("PATCH", f"Groups/{group.json()['id']}", {
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": [{"op": "replace", "path": "displayName", "value": f"switchyard:{alice.tenant.slug}:admin"}]})
    assert renamed.status_code == 200
    assert Membership.objects.get(tenant=alice.tenant, user_id=user["id"]).role == "admin"
    removed = scim("PATCH", f"Groups/{group.json()['id']}", {
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": [{"op": "remove", "path": f'members[value eq "{user["id"]}"]'}]})
    assert removed.json()["members"] == []
    assert not Membership.objects.filter(tenant=alice.tenant, user_id=user["id"]).exists()
    assert scim("DELETE", f"Groups/{group.json()['id']}").status_code == 204


def test_deactivating_ends_the_session_and_revokes_personal_keys_at_once(alice):
    user = create_user()
    scim("POST", "Groups", {"displayName": f"switchyard:{alice.tenant.slug}:developer",
                            "members": [{"value": user["id"]}]})
    from django.contrib.auth import get_user_model

    account = get_user_model().objects.get(pk=user["id"])
    raw = make_key(alice.tenant, account, role="developer", name="laptop").raw
    session = Client()
    session.force_login(account)
    assert session.get("/console/").status_code == 200
    assert bearer(raw).get(f"/api/v1/tenants/{alice.tenant.slug}/").status_code == 200
    patched = scim("PATCH", f"Users/{user['id']}", {  # RFC 7644 §3.5.2.3, as Okta and Entra send it
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": [{"op": "replace", "value": {"active": False}}]})
    assert patched.status_code == 200 and patched.json()["active"] is False
    assert session.get("/console/").status_code == 302  # signed out
    assert bearer(raw).get(f"/api/v1/tenants/{alice.tenant.slug}/").status_code == 401
    assert ApiKey.objects.get(user=account).revoked_at is not None
    row = AuditEvent.objects.get(action="scim.user_deactivate")
    assert row.after == {"username": "bjensen", "sessions_ended": 1} and row.actor_label == "scim:okta"


def test_a_provider_sees_and_changes_only_what_it_provisioned(alice):
    user = create_user()
    assert scim("GET", f"Users/{user['id']}", token=OTHER_TOKEN).status_code == 404
    assert scim("PATCH", f"Users/{alice.user.pk}", {"Operations": [{"op": "replace", "path": "active",
                                                                     "value": False}]}).status_code == 404
    alice.user.refresh_from_db()
    assert alice.user.is_active
    assert scim("GET", "Users", token=OTHER_TOKEN).json()["totalResults"] == 0
