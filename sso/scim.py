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
from django.http import JsonResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt

from sso import services
from sso.models import ScimGroup
from sso.providers import providers

USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Group"
LIST_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:ListResponse"
ERROR_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:Error"
FILTER = re.compile(r'^\s*(userName|externalId|displayName)\s+eq\s+"([^"]*)"\s*$')


def _answer(body: dict, status: int = 200) -> JsonResponse:
    return JsonResponse(body, status=status, content_type="application/scim+json")


def _error(status: int, detail: str) -> JsonResponse:
    return _answer({"schemas": [ERROR_SCHEMA], "status": str(status), "detail": detail}, status)


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
        except (ValueError, KeyError, TypeError) as exc:
            return _error(400, f"Malformed request: {exc}")
        except ValidationError as exc:
            return _error(409 if "userName" in getattr(exc, "message_dict", {}) else 400, "; ".join(exc.messages))
    return view


def _user_json(request, user) -> dict:
    return {"schemas": [USER_SCHEMA], "id": str(user.pk), "externalId": user.scim_account.external_id,
            "userName": user.username, "active": user.is_active,
            "emails": [{"value": user.email, "primary": True}] if user.email else [],
            "meta": {"resourceType": "User", "location": request.build_absolute_uri(
                reverse("scim-user", args=[user.pk]))}}


def _group_json(request, group) -> dict:
    return {"schemas": [GROUP_SCHEMA], "id": str(group.pk), "displayName": group.display_name,
            "externalId": group.external_id,
            "members": [{"value": str(u.pk), "display": u.username} for u in group.members.order_by("pk")],
            "meta": {"resourceType": "Group", "location": request.build_absolute_uri(
                reverse("scim-group", args=[group.pk]))}}


def _list(request, rows, to_json) -> JsonResponse:
    resources = [to_json(request, row) for row in rows]
    return _answer({"schemas": [LIST_SCHEMA], "totalResults": len(resources), "startIndex": 1,
                    "itemsPerPage": len(resources), "Resources": resources})


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
        return _error(400, 'Only `userName eq "…"` and `externalId eq "…"` filters are supported.')
    if match:
        field = {"userName": "username", "externalId": "scim_account__external_id"}.get(match.group(1))
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
        return JsonResponse({}, status=204, content_type="application/scim+json")
    if request.method == "PUT":
        changes = {"user_name": body["userName"], "email": _email(body), "active": body.get("active", True),
                   "external_id": body.get("externalId", found.scim_account.external_id)}
    elif request.method == "PATCH":
        changes = _user_patch(body)
    else:
        return _error(405, "GET, PUT, PATCH or DELETE.")
    return _answer(_user_json(request, services.scim_update_user(found, provider=provider, **changes)))


def _user_patch(body) -> dict:
    """RFC 7644 §3.5.2: `replace`/`add` of active, userName, externalId, emails — with a path or a value object."""
    changes: dict[str, object] = {}
    for operation in body["Operations"]:
        if operation["op"].lower() not in ("replace", "add"):
            raise ValueError(f"unsupported op {operation['op']!r} on a user")
        values = {operation["path"]: operation["value"]} if operation.get("path") else operation["value"]
        for path, value in values.items():
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
    if match and match.group(1) == "displayName":
        rows = rows.filter(display_name=match.group(2))
    elif request.GET.get("filter"):
        return _error(400, 'Only `displayName eq "…"` filters are supported.')
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
        return JsonResponse({}, status=204, content_type="application/scim+json")
    if request.method == "PUT":
        name, members = body["displayName"], [m["value"] for m in body.get("members", [])]
    elif request.method == "PATCH":
        name, members = _group_patch(found, body)
    else:
        return _error(405, "GET, PUT, PATCH or DELETE.")
    saved = services.scim_save_group(provider=provider, display_name=name, member_ids=members, group=found)
    return _answer(_group_json(request, saved))


MEMBER_FILTER = re.compile(r'^members\[value eq "([^"]+)"\]$')


def _group_patch(found, body) -> tuple[str, list]:
    """add / remove / replace of members (path `members`, or `members[value eq "id"]`) and displayName."""
    name, members = found.display_name, [str(pk) for pk in found.members.values_list("pk", flat=True)]
    for operation in body["Operations"]:
        op, path, value = operation["op"].lower(), operation.get("path", ""), operation.get("value")
        one = MEMBER_FILTER.match(path or "")
        if op == "remove" and one:
            members = [m for m in members if m != one.group(1)]
        elif path == "members" and op in ("add", "remove", "replace"):
            ids = [str(m["value"]) for m in value or []]
            members = (ids if op == "replace" else [m for m in members if m not in ids]
                       if op == "remove" else members + [i for i in ids if i not in members])
        elif op == "replace" and (path == "displayName" or (not path and isinstance(value, dict))):
            name = value if path else value.get("displayName", name)
        else:
            raise ValueError(f"unsupported {op} of {path or 'the group'}")
    return name, members
