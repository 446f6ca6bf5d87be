"""Every route Django knows, called without valid credentials, must refuse — except the public list.

The route list is walked from `get_resolver()`, so a route added later is covered without editing
this file. Outcomes, by kind of route:
- PUBLIC (documented in controlplane/urls.py): answers without credentials.
- API (`/api/v1/…`): 401 or 403 with a JSON body; a rejected key is audited by its prefix only.
- SCIM (`/scim/v2/…`): 401 with a SCIM error body for every method and every variant, a valid API key
  included — only an identity provider's SCIM token opens them (tests/sso/test_scim.py).
- HTML (console, admin): a redirect, with an empty body, whose chain ends at the console sign-in
  page — the page content is never sent. These pages read only the session cookie, so they get
  the variants that put a *valid* key somewhere (HTML_VARIANTS) besides no credentials at all.
  `/console/logout/` is the one exception: it is POST-only, so a GET is a 405 with an empty body
  (nothing to leak, nothing to sign out of).
"""
import base64
import json
import logging
import re
from datetime import timedelta

import pytest
from django.contrib.contenttypes.models import ContentType
from django.urls import URLResolver, get_resolver, resolve
from django.utils import timezone
from rest_framework.test import APIClient

from apikeys import keyformat
from apikeys.models import ApiKey
from apikeys.scopes import Scope
from audit.models import AuditEvent
from tests.factories import make_key

PUBLIC = {"healthz", "api/schema/", "api/docs/", "console/login/",  # plus STATIC_URL, not routed by Django
          "console/join/<str:token>/", "console/sso/<slug:provider>/"}
# Public routes whose path names what they open (an invitation link's one-time token, an identity
# provider): a made-up one is a 404. (The SSO callback is no exception: without a provider's answer it
# sends the visitor back to the sign-in page, like every other console page.)
PUBLIC_BY_TOKEN = {"console/join/<str:token>/", "console/sso/<slug:provider>/"}
LOGIN_PAGE = "/console/login/"
# The admin's sign-in URL is itself a route checked here: it redirects to LOGIN_PAGE.
LOGIN_PAGES = {LOGIN_PAGE, "/admin/login/"}
POST_ONLY_HTML = {"console/logout/"}
MALFORMED = "sy_live_this-is-not-a-key-at-all-0123456789"


def _walk(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern), pattern.name


ROUTES = sorted(set(_walk(get_resolver().url_patterns)), key=lambda r: (r[0], r[1] or ""))


def _plausible(name: str, pattern: str, values: dict) -> str:
    """A known id/slug for `name`, else a value the group's own regex or converter accepts."""
    if name in values:
        return str(values[name])
    if re.fullmatch(r"[\w|-]+", pattern) and "|" in pattern:  # an alternation: (drain|restart)
        return pattern.split("|")[0]
    return "1" if pattern in ("int", "path", "") or "0-9" in pattern or "\\d" in pattern else values["slug"]


def _fill(route: str, values: dict) -> str:
    """A concrete path for a route: named groups / converters filled, regex syntax removed."""
    group = r"\(\?P<(\w+)>((?:[^()]|\([^()]*\))*)\)"
    path = re.sub(group, lambda m: _plausible(m.group(1), m.group(2), values), route)
    path = re.sub(r"<(?:(\w+):)?(\w+)>", lambda m: _plausible(m.group(2), m.group(1) or "", values), path)
    path = path.replace("^", "").replace("$", "").replace("/?", "/")
    return "/" + path.replace("\\", "")


@pytest.fixture
def ids(alice):
    """Real ids and slugs to put in URLs, so that a refusal is never a mere 404 in disguise."""
    member = alice.tenant.memberships.first()
    key = ApiKey.objects.filter(tenant=alice.tenant).first()
    return {
        "slug": alice.tenant.slug, "tenant_slug": alice.tenant.slug, "member-pk": member.pk,
        "api-key-pk": key.pk, "quota-pk": alice.tenant.quota_policies.first().pk, "key_id": key.pk,
        "member_id": member.pk,
        "seq": AuditEvent.objects.filter(tenant=alice.tenant).first().seq, "pk": 1, "object_id": alice.user.pk,
        "id": alice.user.pk,
        "content_type_id": ContentType.objects.get_for_model(ApiKey).pk, "app_label": "auth", "url": "no-such-page/",
    }


def concrete(route, name, ids) -> str:
    prefix = (name or "").rsplit("-", 1)[0]
    values = {**ids, "pk": ids.get(f"{prefix}-pk", ids["pk"])}
    return _fill(route, values)


@pytest.fixture
def keys(alice):
    revoked = make_key(alice.tenant, alice.user, name="revoked")
    ApiKey.objects.filter(pk=revoked.api_key.pk).update(revoked_at=timezone.now())
    expired = make_key(alice.tenant, alice.user, name="expired")
    ApiKey.objects.filter(pk=expired.api_key.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    inference = make_key(alice.tenant, alice.user, name="inference", scopes=(Scope.INFERENCE,))
    return {"valid": alice.key, "revoked": revoked.raw, "expired": expired.raw, "inference": inference.raw}


def variants(keys):
    """(name, extra query string, headers, prefix an audit row must carry, "" for none, None if not audited)."""
    valid = keys["valid"]
    basic = base64.b64encode(f"{valid}:".encode()).decode()
    return [
        ("no credentials", "", {}, None),
        ("valid key as Bearer", "", {"HTTP_AUTHORIZATION": f"Bearer {valid}"}, None),  # HTML only
        ("malformed key", "", {"HTTP_AUTHORIZATION": f"Bearer {MALFORMED}"}, ""),
        ("revoked key", "", {"HTTP_AUTHORIZATION": f"Bearer {keys['revoked']}"},
         keyformat.display_prefix(keys["revoked"])),
        ("expired key", "", {"HTTP_AUTHORIZATION": f"Bearer {keys['expired']}"},
         keyformat.display_prefix(keys["expired"])),
        ("?api_key=", f"api_key={valid}", {}, None),
        ("?key=", f"key={valid}", {}, None),
        ("?access_token=", f"access_token={valid}", {}, None),
        ("X-Api-Key", "", {"HTTP_X_API_KEY": valid}, None),
        ("Api-Key", "", {"HTTP_API_KEY": valid}, None),
        ("Authorization: Token", "", {"HTTP_AUTHORIZATION": f"Token {valid}"}, None),
        ("Authorization: Basic", "", {"HTTP_AUTHORIZATION": f"Basic {basic}"}, None),
    ]


HTML_VARIANTS = {"no credentials", "valid key as Bearer", "?api_key=", "X-Api-Key", "Authorization: Basic"}
BEARER_VARIANTS = {"malformed key", "revoked key", "expired key"}


def _with_query(url, query):
    return url if not query else url + ("&" if "?" in url else "?") + query


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def _html_refusal(client, url, headers) -> str | None:
    """None if the answer is an empty-bodied redirect chain ending at the sign-in page."""
    response = client.get(url, **headers)
    for _ in range(5):
        if response.status_code not in (301, 302):
            return f"{response.status_code} instead of a redirect"
        if _body(response):
            return "a redirect with a body"
        location = response["Location"]
        if location.split("?")[0] in LOGIN_PAGES and url.split("?")[0] != location.split("?")[0]:
            return None
        response = client.get(location, **headers)
    return "redirect chain never reached the sign-in page"


def _api_refusal(client, url, headers, methods) -> str | None:
    for method in methods:
        response = getattr(client, method)(url, **headers)
        if response.status_code not in (401, 403):
            return f"{method} {response.status_code}"
        if "detail" not in response.json():
            return f"{method}: refusal without a JSON detail"
    return None


def _kind(route):
    if route in PUBLIC:
        return "public"
    if route.startswith("scim/"):  # identity providers' provisioning: their own bearer token, nothing else
        return "scim"
    return "api" if route.startswith("api/") else "html"


SCIM_ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"


def _scim_refusal(client, url, headers) -> str | None:
    """401 with a SCIM error body for every method: a key, a session or nothing opens no SCIM route."""
    for method in ("get", "post", "put", "patch", "delete"):
        response = getattr(client, method)(url, **headers)
        if response.status_code != 401 or SCIM_ERROR not in response.content.decode():
            return f"{method} {response.status_code}"
    return None


@pytest.mark.parametrize("route,name", ROUTES, ids=[f"{r}|{n}" for r, n in ROUTES])
def test_route_refuses_without_valid_credentials(route, name, ids, keys, caplog):
    caplog.set_level(logging.DEBUG)
    url = concrete(route, name, ids)
    assert resolve(url.split("?")[0]).route == route.replace("^", ""), url  # reaches this very route
    client, kind, problems, tried = APIClient(), _kind(route), {}, []
    if kind == "public":
        response = client.get(url)
        assert response.status_code == (404 if route in PUBLIC_BY_TOKEN else 200), (url, response.status_code)
        return
    for variant, query, headers, audited_prefix in variants(keys):
        if (kind == "html" and variant not in HTML_VARIANTS) or (kind == "api" and variant == "valid key as Bearer"):
            continue
        tried.append(variant)
        before = AuditEvent.objects.filter(action="auth.api_key_rejected").count()
        target = _with_query(url, query)
        if kind == "scim":
            problem = _scim_refusal(client, target, headers)
        elif route in POST_ONLY_HTML:
            response = client.get(target, **headers)
            problem = None if (response.status_code, _body(response)) == (405, b"") else f"{response.status_code}"
        elif kind == "html":
            problem = _html_refusal(client, target, headers)
        else:
            methods = ("get", "post") if variant in BEARER_VARIANTS | {"no credentials"} else ("get",)
            problem = _api_refusal(client, target, headers, methods)
            problem = problem or _rejection_audit_problem(before, audited_prefix, len(methods))
        if problem:
            problems[variant] = problem
    assert problems == {}, url
    expected = {"html": len(HTML_VARIANTS), "scim": len(variants(keys))}  # a valid API key opens no SCIM route
    assert len(tried) == expected.get(kind, len(variants(keys)) - 1)
    _assert_no_raw_key_recorded(keys, caplog)


def _rejection_audit_problem(before: int, prefix: str | None, attempts: int) -> str | None:
    """One rejection row per attempt with a bad Bearer key, naming the key by its prefix only."""
    expected = 0 if prefix is None else attempts
    rows = list(AuditEvent.objects.filter(action="auth.api_key_rejected").order_by("-seq")[:expected])
    if AuditEvent.objects.filter(action="auth.api_key_rejected").count() - before != expected:
        return f"expected {expected} auth.api_key_rejected rows"
    if expected and any(row.after["prefix"] != (prefix or None) for row in rows):
        return f"rejection rows carry {[row.after for row in rows]}"
    return None


def _assert_no_raw_key_recorded(keys, caplog):
    secrets = [*keys.values(), MALFORMED]
    table = json.dumps(list(AuditEvent.objects.values()), default=str)
    assert not [s for s in secrets if s in table], "a raw key reached the audit table"
    logged = caplog.text + "".join(record.getMessage() for record in caplog.records)
    assert not [s for s in secrets if s in logged], "a raw key reached the logs"


def test_every_route_is_covered():
    """The walk sees the admin, the console and the API (guards against an empty parametrization)."""
    kinds = {_kind(route) for route, _ in ROUTES}
    assert kinds == {"public", "api", "html", "scim"}
    assert {"api/v1/audit/export", "console/", "admin/"} <= {route for route, _ in ROUTES}


@pytest.mark.parametrize("route,name", [r for r in ROUTES if _kind(r[0]) == "api"],
                         ids=[f"{r}|{n}" for r, n in ROUTES if _kind(r) == "api"])
def test_inference_only_key_is_refused_by_admin_api(route, name, ids, keys):
    url = concrete(route, name, ids)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {keys['inference']}")
    statuses = {client.get(url).status_code, client.post(url, {}, format="json").status_code}
    assert statuses == {403}, url


@pytest.mark.parametrize("route,name", [r for r in ROUTES if _kind(r[0]) == "public"])
def test_public_routes_answer_without_credentials(route, name, ids, api):
    assert api.get(concrete(route, name, ids)).status_code == (404 if route in PUBLIC_BY_TOKEN else 200)


def test_the_same_valid_key_works_in_the_bearer_header(alice, keys):
    """Positive control: the refusals above are about where the key is, not the key itself."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {keys['valid']}")
    assert client.get("/api/v1/tenants/").status_code == 200


def test_rejection_rows_hold_only_the_prefix(alice, keys, api):
    api.get("/api/v1/tenants/", HTTP_AUTHORIZATION=f"Bearer {keys['revoked']}")
    row = AuditEvent.objects.filter(action="auth.api_key_rejected").latest("seq")
    assert row.actor_label == keyformat.display_prefix(keys["revoked"])
    assert row.after == {"reason": "revoked API key", "prefix": keyformat.display_prefix(keys["revoked"])}
    assert keys["revoked"] not in json.dumps([row.before, row.after, row.actor_label, row.target_id])


# --- every route and method of the API and the console has a row in a role matrix ---

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _api_methods(callback) -> set[str]:
    """What a DRF route serves: a viewset route's action map, or an APIView's handler methods."""
    actions = getattr(callback, "actions", None)
    if actions:  # DRF adds "head" to it once a GET was served
        return {method.upper() for method in actions} & set(HTTP_METHODS)
    view_class = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    return {method for method in HTTP_METHODS if hasattr(view_class, method.lower())}


def _named_routes(prefix: str):
    def walk(patterns, route="", namespace=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
                yield from walk(pattern.url_patterns, route + str(pattern.pattern), inner)
            elif (route + str(pattern.pattern)).startswith(prefix):
                yield route + str(pattern.pattern), f"{namespace}{pattern.name}", pattern.callback
    return list(walk(get_resolver().url_patterns))


def api_routes() -> set[tuple[str, str]]:
    return {(name, method) for _, name, callback in _named_routes("api/") for method in _api_methods(callback)}


def console_routes(ids, user) -> set[tuple[str, str]]:
    """Each console route with each method it serves: one that neither a signed-out visitor nor a signed-in
    user without any role gets a 405 for (read pages are GET-only, forms POST-only, sign-in both)."""
    from django.test import Client

    def signed_in():  # a fresh one per probe: probing POST /console/logout/ signs it out
        client = Client()
        client.force_login(user)
        return client

    served = set()
    for route, name, _ in _named_routes("console/"):
        url = concrete(route, name, ids)
        for method in HTTP_METHODS:
            if all(client.generic(method, url).status_code != 405 for client in (Client(), signed_in())):
                served.add((name, method))
    return served


def test_every_api_route_and_method_has_a_role_matrix_row():
    from tests.api.test_role_matrix import API_MATRIX

    routes = api_routes()
    assert len(routes) > 50
    assert {"missing from the matrix": routes - API_MATRIX, "no such route": API_MATRIX - routes} == \
        {"missing from the matrix": set(), "no such route": set()}


def test_every_console_route_and_method_has_a_role_matrix_row(ids):
    from tests.api.test_console_role_matrix import CONSOLE_MATRIX
    from tests.factories import make_user

    routes = console_routes(ids, make_user("no-role"))
    assert len(routes) > 40
    assert {"missing from the matrix": routes - CONSOLE_MATRIX, "no such route": CONSOLE_MATRIX - routes} == \
        {"missing from the matrix": set(), "no such route": set()}
