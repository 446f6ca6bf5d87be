"""SCIM 2.0 discovery (RFC 7644 §4, RFC 7643 §5-§7): /ServiceProviderConfig, /ResourceTypes, /Schemas.

What an identity provider's connector reads before provisioning (Okta and Entra ID check them when a
connection is tested) — and it says only what sso.scim really does: PATCH and filters yes (`eq` on
userName / externalId / displayName), bulk, sort, ETags and password changes no. Like every SCIM route
these answer only a provider's SCIM bearer token (tests/api/test_route_inventory.py): RFC 7644 §4 leaves
authentication of the discovery endpoints to the service provider, and the connectors send the token.
"""
from django.urls import reverse

from sso.scim import (
    GROUP_SCHEMA,
    LIST_SCHEMA,
    MAX_RESULTS,
    USER_SCHEMA,
    _answer,
    _error,
    scim_view,
)

SPC_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig"
RESOURCE_TYPE_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:ResourceType"
SCHEMA_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Schema"


def _attr(name, type_="string", *, required=False, multi=False, mutability="readWrite", returned="default",
          uniqueness="none", case_exact=False, description="", sub=None, reference_types=None) -> dict:
    """One attribute definition (RFC 7643 §7) with every characteristic spelled out, as connectors expect."""
    attribute = {"name": name, "type": type_, "multiValued": multi, "description": description, "required": required,
                 "caseExact": case_exact, "mutability": mutability, "returned": returned, "uniqueness": uniqueness}
    if sub is not None:
        attribute["subAttributes"] = sub
    if reference_types is not None:
        attribute["referenceTypes"] = reference_types
    return attribute


USER_ATTRIBUTES = [
    _attr("userName", required=True, uniqueness="server",
          description="The Switchyard username; unique. Sign-in itself goes through the provider (OIDC)."),
    _attr("active", "boolean", description="false ends the user's sessions and revokes their personal API keys."),
    _attr("emails", "complex", multi=True, description="The primary (or first) address is the account's e-mail.",
          sub=[_attr("value", description="The address."),
               _attr("type", description="work, home or other; accepted, not stored."),
               _attr("primary", "boolean", description="Which address is the account's.")]),
]
GROUP_ATTRIBUTES = [
    _attr("displayName", required=True,
          description='A role mapping when it reads "<prefix>:<tenant>:<role>" (docs/sso.md); other groups are kept '
                      "and grant nothing."),
    _attr("members", "complex", multi=True, description="Users of this provider in the group.",
          sub=[_attr("value", mutability="immutable", description="The member's id."),
               _attr("display", mutability="readOnly", description="The member's username."),
               _attr("$ref", "reference", mutability="immutable", reference_types=["User"],
                     description="Not sent; accepted and ignored.")]),
]
SCHEMAS = {
    USER_SCHEMA: ("User", "User Account", USER_ATTRIBUTES),
    GROUP_SCHEMA: ("Group", "Group", GROUP_ATTRIBUTES),
}
RESOURCE_TYPES = {
    "User": ("/Users", "User Account", USER_SCHEMA),
    "Group": ("/Groups", "Group: its displayName maps to tenant roles", GROUP_SCHEMA),
}


def _location(request, name: str, *args) -> str:
    return request.build_absolute_uri(reverse(name, args=args))


@scim_view
def service_provider_config(request, provider, body):
    if request.method != "GET":
        return _error(405, "GET.")
    return _answer({
        "schemas": [SPC_SCHEMA],
        "patch": {"supported": True},
        "bulk": {"supported": False, "maxOperations": 0, "maxPayloadSize": 0},
        "filter": {"supported": True, "maxResults": MAX_RESULTS},
        "changePassword": {"supported": False},
        "sort": {"supported": False},
        "etag": {"supported": False},
        "authenticationSchemes": [{
            "type": "oauthbearertoken", "name": "OAuth Bearer Token", "primary": True,
            "description": "The provider's SCIM token (scim_token / scim_token_file in SWITCHYARD_OIDC_PROVIDERS), "
                           "sent as `Authorization: Bearer <token>` (docs/sso.md)."}],
        "meta": {"resourceType": "ServiceProviderConfig", "location": _location(request, "scim-spc")},
    })


def _resource_type_json(request, name: str) -> dict:
    endpoint, description, schema = RESOURCE_TYPES[name]
    return {"schemas": [RESOURCE_TYPE_SCHEMA], "id": name, "name": name, "endpoint": endpoint,
            "description": description, "schema": schema, "schemaExtensions": [],
            "meta": {"resourceType": "ResourceType", "location": _location(request, "scim-resource-type", name)}}


def _schema_json(request, schema_id: str) -> dict:
    name, description, attributes = SCHEMAS[schema_id]
    return {"schemas": [SCHEMA_SCHEMA], "id": schema_id, "name": name, "description": description,
            "attributes": attributes,
            "meta": {"resourceType": "Schema", "location": _location(request, "scim-schema", schema_id)}}


def _listing(items: list) -> dict:
    return {"schemas": [LIST_SCHEMA], "totalResults": len(items), "startIndex": 1, "itemsPerPage": len(items),
            "Resources": items}


@scim_view
def resource_types(request, provider, body):
    if request.method != "GET":
        return _error(405, "GET.")
    return _answer(_listing([_resource_type_json(request, name) for name in RESOURCE_TYPES]))


@scim_view
def resource_type(request, provider, body, name):
    if request.method != "GET":
        return _error(405, "GET.")
    if name not in RESOURCE_TYPES:
        return _error(404, "No such resource type.")
    return _answer(_resource_type_json(request, name))


@scim_view
def schemas(request, provider, body):
    if request.method != "GET":
        return _error(405, "GET.")
    return _answer(_listing([_schema_json(request, schema_id) for schema_id in SCHEMAS]))


@scim_view
def schema(request, provider, body, schema_id):
    if request.method != "GET":
        return _error(405, "GET.")
    if schema_id not in SCHEMAS:
        return _error(404, "No such schema.")
    return _answer(_schema_json(request, schema_id))
