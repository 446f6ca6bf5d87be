"""SCIM 2.0 (RFC 7643 / 7644) for identity providers: /scim/v2/Users and /scim/v2/Groups.

Each provider of SWITCHYARD_OIDC_PROVIDERS with a `scim_token` (or `scim_token_file`) authenticates with
`Authorization: Bearer <token>` and sees and changes only the accounts and groups it provisioned.
Deactivating a user (PATCH active=false, PUT with active false, or DELETE) ends their sessions and
revokes their personal API keys at once. The changes are made by sso.services, audited.
"""
import hmac
import json
import re

from django.core.exceptions import ValidationError
from django.http import HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt

from sso import services
from sso.models import ScimGroup
from sso.providers import providers

USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Group"
LIST_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:ListResponse"
ERROR_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:Error"
# RFC 7644 §3.4.2.2: attribute names and operators are case-insensitive (`username EQ "x"` is `userName eq "x"`).
FILTER = re.compile(r'^\s*(userName|externalId|displayName)\s+eq\s+"([^"]*)"\s*$', re.IGNORECASE)
CANONICAL = {"username": "userName", "externalid": "externalId", "displayname": "displayName", "active": "active",
             "emails": "emails", "members": "members"}
MAX_RESULTS = 200  # advertised as filter.maxResults in ServiceProviderConfig (sso.scim_discovery)


def _answer(body: dict, status: int = 200) -> JsonResponse:
    return JsonResponse(body, status=status, content_type="application/scim+json")


def _error(status: int, detail: str, scim_type: str = "") -> JsonResponse:
    body = {"schemas": [ERROR_SCHEMA], "status": str(status), "detail": detail}
    if scim_type:  # RFC 7644 §3.12: what kind of 400 / 409 it is (invalidFilter, invalidValue, uniqueness…)
        body["scimType"] = scim_type
    return _answer(body, status)


def _no_content() -> HttpResponse:
    """204 for DELETE: no body at all (RFC 9110 §15.3.5), not even `{}`."""
    return HttpResponse(status=204)


def _attribute(name: str) -> str:
    """An attribute path with its leading name as the schema spells it (names are case-insensitive)."""
    name = (name or "").strip()
    for schema in (USER_SCHEMA, GROUP_SCHEMA):  # a fully qualified path: urn:…:core:2.0:User:userName
        if name.lower().startswith(schema.lower() + ":"):
            name = name[len(schema) + 1:]
    match = re.match(r"^([A-Za-z][A-Za-z0-9]*)(.*)$", name, re.DOTALL)
    if match is None:
        return (name or "").strip()
    return CANONICAL.get(match.group(1).lower(), match.group(1)) + match.group(2)


def _provider(request):
    scheme, _, token = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        return None
    for provider in providers().values():
        if provider.scim_token and hmac.compare_digest(provider.scim_token.encode(), token.strip().encode()):
            return provider
    return None


def scim_view(handler):
    @csrf_exempt
    def view(request, *args, **kwargs):
        provider = _provider(request)
        if provider is None:
            response = _error(401, "A valid SCIM bearer token is required.")
            response["WWW-Authenticate"] = 'Bearer realm="switchyard-scim"'
            return response
        try:
            body = json.loads(request.body or b"{}") if request.method in ("POST", "PUT", "PATCH") else {}
            return handler(request, provider, body, *args, **kwargs)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return _error(400, f"Malformed request: {exc}", "invalidSyntax")
        except ValidationError as exc:
            if "userName" in getattr(exc, "message_dict", {}):
                return _error(409, "; ".join(exc.messages), "uniqueness")
            return _error(400, "; ".join(exc.messages), "invalidValue")
    return view


def _user_json(request, user) -> dict:
    return {"schemas": [USER_SCHEMA], "id": str(user.pk), "externalId": user.scim_account.external_id,
            "userName": user.username, "active": user.is_active,
            "emails": [{"value": user.email, "primary": True}] if user.email else [],
            "meta": {"resourceType": "User", "location": request.build_absolute_uri(
                reverse("scim-user", args=[user.pk]))}}


def _group_json(request, group) -> dict:
    body = _full_group_json(request, group)
    # Entra ID reads groups with `excludedAttributes=members` (a large group's list is no small answer)
    excluded = {_attribute(a.strip()) for a in request.GET.get("excludedAttributes", "").split(",")}
    return {k: v for k, v in body.items() if k not in excluded} if "members" in excluded else body


def _full_group_json(request, group) -> dict:
    return {"schemas": [GROUP_SCHEMA], "id": str(group.pk), "displayName": group.display_name,
            "externalId": group.external_id,
            "members": [{"value": str(u.pk), "display": u.username} for u in group.members.order_by("pk")],
            "meta": {"resourceType": "Group", "location": request.build_absolute_uri(
                reverse("scim-group", args=[group.pk]))}}


def _list(request, rows, to_json) -> JsonResponse:
    """RFC 7644 §3.4.2.4: 1-based `startIndex` and `count` (at most MAX_RESULTS); totalResults counts every match."""
    start = max(_int_param(request, "startIndex", 1), 1)
    count = min(max(_int_param(request, "count", MAX_RESULTS), 0), MAX_RESULTS)
    total = rows.count()
    resources = [to_json(request, row) for row in rows[start - 1:start - 1 + count]]
    return _answer({"schemas": [LIST_SCHEMA], "totalResults": total, "startIndex": start,
                    "itemsPerPage": len(resources), "Resources": resources})


def _int_param(request, name: str, default: int) -> int:
    raw = request.GET.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer") from None


def _users(provider):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.filter(scim_account__provider=provider.name).select_related("scim_account")


def _email(body) -> str:
    emails = body.get("emails") or []
    primary = [e for e in emails if e.get("primary")] or emails
    return primary[0]["value"] if primary else ""


@scim_view
def users(request, provider, body):
    if request.method == "POST":
        user = services.scim_create_user(provider=provider, user_name=body["userName"], email=_email(body),
                                         external_id=body.get("externalId", ""), active=body.get("active", True))
        return _answer(_user_json(request, user), 201)
    if request.method != "GET":
        return _error(405, "GET or POST.")
    rows = _users(provider).order_by("pk")
    match = FILTER.match(request.GET.get("filter", "")) if request.GET.get("filter") else None
    if request.GET.get("filter") and not match:
        return _error(400, 'Only `userName eq "…"` and `externalId eq "…"` filters are supported.', "invalidFilter")
    if match:
        field = {"userName": "username", "externalId": "scim_account__external_id"}.get(_attribute(match.group(1)))
        rows = rows.filter(**{field: match.group(2)}) if field else rows.none()
    return _list(request, rows, _user_json)


@scim_view
def user(request, provider, body, pk):
    found = _users(provider).filter(pk=pk).first()
    if found is None:
        return _error(404, "No such user.")
    if request.method == "GET":
        return _answer(_user_json(request, found))
    if request.method == "DELETE":
        services.scim_update_user(found, provider=provider, active=False)
        return _no_content()
    if request.method == "PUT":
        changes = {"user_name": body["userName"], "email": _email(body), "active": body.get("active", True),
                   "external_id": body.get("externalId", found.scim_account.external_id)}
    elif request.method == "PATCH":
        changes = _user_patch(body)
    else:
        return _error(405, "GET, PUT, PATCH or DELETE.")
    return _answer(_user_json(request, services.scim_update_user(found, provider=provider, **changes)))


def _user_patch(body) -> dict:
    """RFC 7644 §3.5.2: `replace`/`add` of active, userName, externalId, emails — with a path or a value object.

    Attributes Switchyard does not keep (name, title, addresses…) are accepted and ignored, as the IdPs
    send them with every change; so is `remove` of one of those.
    """
    changes: dict[str, object] = {}
    for operation in body["Operations"]:
        op, path = operation["op"].lower(), _attribute(operation.get("path", ""))
        if op == "remove" and path.split("[")[0].split(".")[0] not in ("active", "userName", "externalId", "emails"):
            continue
        if op not in ("replace", "add"):
            raise ValueError(f"unsupported op {operation['op']!r} of {path or 'the user'}")
        values = {path: operation["value"]} if path else operation["value"]
        for path, value in ((_attribute(k), v) for k, v in values.items()):
            if path == "active":
                changes["active"] = value if isinstance(value, bool) else str(value).lower() == "true"
            elif path == "userName":
                changes["user_name"] = value
            elif path == "externalId":
                changes["external_id"] = value
            elif path.startswith("emails"):
                changes["email"] = value if isinstance(value, str) else _email({"emails": value})
    return changes


@scim_view
def groups(request, provider, body):
    if request.method == "POST":
        group = services.scim_save_group(provider=provider, display_name=body["displayName"],
                                         member_ids=[m["value"] for m in body.get("members", [])],
                                         external_id=body.get("externalId", ""))
        return _answer(_group_json(request, group), 201)
    if request.method != "GET":
        return _error(405, "GET or POST.")
    rows = ScimGroup.objects.filter(provider=provider.name).order_by("pk")
    match = FILTER.match(request.GET.get("filter", "")) if request.GET.get("filter") else None
    if match and _attribute(match.group(1)) in ("displayName", "externalId"):
        field = "display_name" if _attribute(match.group(1)) == "displayName" else "external_id"
        rows = rows.filter(**{field: match.group(2)})
    elif request.GET.get("filter"):
        return _error(400, 'Only `displayName eq "…"` and `externalId eq "…"` filters are supported.', "invalidFilter")
    return _list(request, rows, _group_json)


@scim_view
def group(request, provider, body, pk):
    found = ScimGroup.objects.filter(provider=provider.name, pk=pk).first()
    if found is None:
        return _error(404, "No such group.")
    if request.method == "GET":
        return _answer(_group_json(request, found))
    if request.method == "DELETE":
        services.scim_delete_group(found, provider=provider)
        return _no_content()
    if request.method == "PUT":
        name, members = body["displayName"], [m["value"] for m in body.get("members", [])]
    elif request.method == "PATCH":
        name, members = _group_patch(found, body)
    else:
        return _error(405, "GET, PUT, PATCH or DELETE.")
    saved = services.scim_save_group(provider=provider, display_name=name, member_ids=members, group=found)
    return _answer(_group_json(request, saved))


MEMBER_FILTER = re.compile(r'^members\[value eq "([^"]+)"\]$', re.IGNORECASE)


def _pathless_split(operations) -> list[dict]:
    """A path-less add / replace of {"members": [...], "displayName": ...} as one operation per attribute."""
    split = []
    for operation in operations:
        value = operation.get("value")
        if operation.get("path") or not isinstance(value, dict) or operation["op"].lower() not in ("add", "replace"):
            split.append(operation)
            continue
        for attribute, item in value.items():
            if _attribute(attribute) in ("members", "displayName"):
                split.append({"op": operation["op"], "path": _attribute(attribute), "value": item})
    return split


def _group_patch(found, body) -> tuple[str, list]:
    """add / remove / replace of members (path `members`, or `members[value eq "id"]`) and displayName;
    without a path, a value object holding `displayName` and / or `members` (Okta, OneLogin)."""
    name, members = found.display_name, [str(pk) for pk in found.members.values_list("pk", flat=True)]
    for operation in _pathless_split(body["Operations"]):
        op, path, value = operation["op"].lower(), _attribute(operation.get("path", "")), operation.get("value")
        one = MEMBER_FILTER.match(path or "")
        if op == "remove" and one:
            members = [m for m in members if m != one.group(1)]
        elif path == "members" and op in ("add", "remove", "replace"):
            ids = [str(m["value"]) for m in value or []]
            members = (ids if op == "replace" else [m for m in members if m not in ids]
                       if op == "remove" else members + [i for i in ids if i not in members])
        elif op in ("replace", "add") and path == "displayName":
            name = value
        else:
            raise ValueError(f"unsupported {op} of {path or 'the group'}")
    return name, members
