"""SCIM discovery (RFC 7644 §4; RFC 7643 §5-§7): what an IdP connector reads before provisioning, saying
only what the Users and Groups endpoints really support."""
import pytest
from django.test import Client

from tests.sso.test_scim import SCIM, TOKEN, scim, scim_providers  # noqa: F401  (the autouse fixture)

SPC = "urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig"
USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
LIST = "urn:ietf:params:scim:api:messages:2.0:ListResponse"


def test_service_provider_config_says_what_is_supported(db):
    response = scim("GET", "ServiceProviderConfig")
    assert response.status_code == 200 and response["Content-Type"] == SCIM
    body = response.json()
    assert body["schemas"] == [SPC]
    assert body["patch"] == {"supported": True}
    assert body["filter"]["supported"] is True and body["filter"]["maxResults"] >= 100
    assert body["bulk"]["supported"] is False and body["sort"] == {"supported": False}
    assert body["etag"] == {"supported": False} and body["changePassword"] == {"supported": False}
    assert [s["type"] for s in body["authenticationSchemes"]] == ["oauthbearertoken"]
    assert body["meta"] == {"resourceType": "ServiceProviderConfig",
                            "location": "http://testserver/scim/v2/ServiceProviderConfig"}


def test_resource_types_name_users_and_groups(db):
    body = scim("GET", "ResourceTypes").json()
    assert body["schemas"] == [LIST] and body["totalResults"] == 2
    by_id = {r["id"]: r for r in body["Resources"]}
    assert by_id["User"]["endpoint"] == "/Users" and by_id["User"]["schema"] == USER
    assert by_id["Group"]["endpoint"] == "/Groups" and by_id["Group"]["schema"] == GROUP
    one = scim("GET", "ResourceTypes/User").json()
    assert one == by_id["User"] and one["meta"]["location"] == "http://testserver/scim/v2/ResourceTypes/User"
    assert scim("GET", "ResourceTypes/Printer").status_code == 404


def test_schemas_define_the_attributes_the_endpoints_read(db):
    body = scim("GET", "Schemas").json()
    assert body["schemas"] == [LIST] and {s["id"] for s in body["Resources"]} == {USER, GROUP}
    user = scim("GET", f"Schemas/{USER}").json()
    attributes = {a["name"]: a for a in user["attributes"]}
    assert set(attributes) == {"userName", "active", "emails"}
    assert attributes["userName"]["required"] is True and attributes["userName"]["uniqueness"] == "server"
    assert {s["name"] for s in attributes["emails"]["subAttributes"]} == {"value", "type", "primary"}
    for attribute in user["attributes"]:  # every characteristic of RFC 7643 §7 is spelled out
        assert {"name", "type", "multiValued", "required", "caseExact", "mutability", "returned",
                "uniqueness"} <= set(attribute)
    group = {a["name"]: a for a in scim("GET", f"Schemas/{GROUP}").json()["attributes"]}
    assert set(group) == {"displayName", "members"} and group["members"]["multiValued"] is True
    assert scim("GET", "Schemas/urn:example:nothing").status_code == 404


@pytest.mark.parametrize("path", ["ServiceProviderConfig", "ResourceTypes", "ResourceTypes/User", "Schemas",
                                  f"Schemas/{USER}"])
def test_discovery_needs_a_scim_token_and_is_read_only(db, path):
    assert Client().get(f"/scim/v2/{path}").status_code == 401
    assert scim("GET", path, token="not-" + TOKEN).status_code == 401
    assert scim("POST", path, {}).status_code == 405
