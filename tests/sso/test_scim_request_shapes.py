"""The request shapes Okta's and Entra ID's SCIM connectors send (their published SCIM guides, RFC 7644),
beyond tests/sso/test_scim.py: case-insensitive filters, paging, PATCH with capitalised ops and string
booleans, Entra's path-less replace with a value object, attributes we do not keep, group member add and
remove in both spellings, `excludedAttributes=members`, and bodiless 204s."""
from django.contrib.auth import get_user_model

from apikeys.models import ApiKey
from tenants.models import Membership
from tests.factories import make_key
from tests.sso.test_scim import create_user, scim, scim_providers  # noqa: F401  (the autouse fixture)

PATCH_OP = "urn:ietf:params:scim:api:messages:2.0:PatchOp"


def _patch(path, *operations):
    response = scim("PATCH", path, {"schemas": [PATCH_OP], "Operations": list(operations)})
    assert response.status_code == 200, response.content
    return response.json()


def test_okta_looks_a_user_up_by_username_with_paging(db):
    created = scim("POST", "Users", {  # Okta's userName is the address
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": "isabella@example.com",
        "name": {"givenName": "Isabella", "familyName": "Lee"}, "active": True,
        "emails": [{"primary": True, "value": "isabella@example.com", "type": "work"}]}).json()
    found = scim("GET", 'Users?filter=userName%20eq%20%22isabella%40example.com%22&startIndex=1&count=100').json()
    assert found["totalResults"] == 1 and found["Resources"][0]["id"] == created["id"]
    assert found["startIndex"] == 1 and found["itemsPerPage"] == 1
    # attribute names and operators are case-insensitive (RFC 7644 §3.4.2.2)
    assert scim("GET", 'Users?filter=USERNAME EQ "isabella@example.com"').json()["totalResults"] == 1
    # Okta's connection test: a random address, no match, still a 200 list
    empty = scim("GET", 'Users?filter=userName eq "3a1b2c@okta.local"&startIndex=1&count=1').json()
    assert empty["totalResults"] == 0 and empty["Resources"] == []
    unsupported = scim("GET", 'Users?filter=name.familyName co "J"')
    assert unsupported.status_code == 400 and unsupported.json()["scimType"] == "invalidFilter"


def test_paging_counts_every_match_and_returns_one_page(db):
    ids = [create_user(f"user{n}", external_id=f"x{n}")["id"] for n in range(5)]
    page = scim("GET", "Users?startIndex=2&count=2").json()
    assert page["totalResults"] == 5 and page["startIndex"] == 2 and page["itemsPerPage"] == 2
    assert [r["id"] for r in page["Resources"]] == ids[1:3]
    assert scim("GET", "Users?count=0").json()["Resources"] == []
    assert scim("GET", "Users?count=lots").status_code == 400


def test_entra_deactivates_with_a_capitalised_op_and_a_string_boolean(alice):
    user = create_user()
    account = get_user_model().objects.get(pk=user["id"])
    Membership.objects.create(tenant=alice.tenant, user=account, role="developer")
    make_key(alice.tenant, account, role="developer", name="laptop")
    patched = _patch(f"Users/{user['id']}", {"op": "Replace", "path": "active", "value": "False"})
    assert patched["active"] is False
    assert ApiKey.objects.get(user=account).revoked_at is not None
    assert _patch(f"Users/{user['id']}", {"op": "Replace", "path": "active", "value": "True"})["active"] is True


def test_entra_path_less_replace_with_a_value_object(db):
    user = create_user()
    patched = _patch(f"Users/{user['id']}", {"op": "replace", "value": {
        "active": False, "userName": "barbara", "externalId": "00u9",
        "name.givenName": "Babs", "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department": "R&D"}})
    assert (patched["active"], patched["userName"], patched["externalId"]) == (False, "barbara", "00u9")


def test_entra_attribute_updates_we_do_not_keep_are_accepted(db):
    user = create_user()
    patched = _patch(f"Users/{user['id']}",
                     {"op": "Add", "path": 'emails[type eq "work"].value', "value": "bj@example.org"},
                     {"op": "Replace", "path": "name.familyName", "value": "Jensen-Smith"},
                     {"op": "Add", "path": "title", "value": "Engineer"},
                     {"op": "Remove", "path": "preferredLanguage"},
                     {"op": "replace", "path": "urn:ietf:params:scim:schemas:core:2.0:User:userName", "value": "bj"})
    assert patched["emails"] == [{"value": "bj@example.org", "primary": True}] and patched["userName"] == "bj"
    refused = scim("PATCH", f"Users/{user['id']}", {"schemas": [PATCH_OP], "Operations": [
        {"op": "remove", "path": "userName"}]})
    assert refused.status_code == 400  # a required attribute cannot be removed


def test_group_members_are_added_and_removed_in_both_spellings(alice):
    one, two = create_user("one", "e1")["id"], create_user("two", "e2")["id"]
    group = scim("POST", "Groups", {"schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
                                    "displayName": f"switchyard:{alice.tenant.slug}:viewer", "members": []}).json()
    path = f"Groups/{group['id']}"
    # Entra: add and remove with path "members" and a list value
    assert [m["value"] for m in _patch(path, {"op": "Add", "path": "members", "value": [{"value": one}]})["members"]] \
        == [one]
    # Okta / OneLogin: a path-less add whose value object holds the members
    added = _patch(path, {"op": "add", "value": {"members": [{"value": two, "display": "two"}]}})
    assert sorted(m["value"] for m in added["members"]) == sorted([one, two])
    assert set(Membership.objects.filter(tenant=alice.tenant, role="viewer").values_list("user_id", flat=True)) >= {
        int(one), int(two)}
    # Okta: remove one member by filter path
    assert [m["value"] for m in _patch(path, {"op": "remove", "path": f'members[value eq "{one}"]'})["members"]] \
        == [two]
    # Entra: remove with a list value
    assert _patch(path, {"op": "Remove", "path": "members", "value": [{"value": two}]})["members"] == []
    assert not Membership.objects.filter(tenant=alice.tenant, user_id__in=[one, two]).exists()
    # Okta: rename with a path-less replace carrying id and displayName
    renamed = _patch(path, {"op": "replace", "value": {"id": group["id"], "displayName": "not a mapping"}})
    assert renamed["displayName"] == "not a mapping"


def test_entra_reads_groups_without_members_and_filters_by_display_name(alice):
    member = create_user()["id"]
    scim("POST", "Groups", {"displayName": "engineers", "members": [{"value": member}]})
    listed = scim("GET", 'Groups?filter=displayName eq "engineers"&excludedAttributes=members').json()
    assert listed["totalResults"] == 1 and "members" not in listed["Resources"][0]
    assert "members" in scim("GET", 'Groups?filter=displayName eq "engineers"').json()["Resources"][0]


def test_deletes_answer_204_without_a_body(db):
    user = create_user()
    group = scim("POST", "Groups", {"displayName": "gone", "members": []}).json()
    for path in (f"Groups/{group['id']}", f"Users/{user['id']}"):
        response = scim("DELETE", path)
        assert response.status_code == 204 and response.content == b""


def test_a_duplicate_username_is_a_409_uniqueness(db):
    create_user()
    response = scim("POST", "Users", {"userName": "bjensen", "emails": []})
    assert response.status_code == 409 and response.json()["scimType"] == "uniqueness"
