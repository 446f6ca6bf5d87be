"""Tenant isolation in the console: tenant A's owner reaches nothing of tenant B through any console route.

Every route that names a tenant's object (a slug, a deployment, an instance, a member, a key, a quota
policy, an invitation) answers B's object exactly as one that does not exist — 404, or 403 for a
platform-only action refused before anything is looked up — whatever the method; every list page shows nothing
of B. Routes are walked from the URL configuration, so a new one is covered without editing this file (the
registry is platform-wide: it has nothing of B's).
"""
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import URLResolver, get_resolver
from django.utils import timezone

from apikeys.models import ApiKey
from audit.actor import Actor
from quotas.models import QuotaPolicy
from tenants.models import Invitation, Membership
from tenants.services import grant_permission, tenant_grants
from tests.api.matrix_world import build_world, make_rollout
from tests.api.test_console_role_matrix import CONSOLE_MATRIX

GHOST = 987654321
# The registry is platform-wide; an invitation link's one-time token is the credential that opens it
# (tests/tenants/test_invitation_links.py); identity providers are the platform's.
GLOBAL_ARGS = {"model_id", "version_id", "token", "provider", "gpu_type_id"}  # GPU types are platform-wide too
BODY = {"role": "viewer", "email": "x@example.test", "min_replicas": 1, "max_replicas": 1, "warm_pool_size": 0,
        "requests_per_minute": "1", "monthly_token_budget": "1", "subject": "user:1"}


def _console_routes():
    def walk(patterns, route=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, route + str(pattern.pattern))
            elif route.startswith("console/"):
                yield route + str(pattern.pattern), f"console:{pattern.name}"
    return list(walk(get_resolver().url_patterns))


def _arg_names(route: str) -> list[str]:
    return [a or b for a, b in re.findall(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>", route)]


def _fill(route: str, values: dict) -> str:
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: str(values[m.group(1)]), route)
    path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(values[m.group(1)]), path)
    return "/" + path.replace("^", "").replace("$", "")


SCOPED = [(route, name) for route, name in _console_routes()
          if _arg_names(route) and not set(_arg_names(route)) & GLOBAL_ARGS]


@pytest.fixture
def world(alice, bob, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    world = build_world(alice, bob)
    world.b_invitation = Invitation.objects.create(tenant=bob.tenant, email=alice.user.email, role="viewer",
                                                   expires_at=timezone.now() - timedelta(seconds=1))  # expired
    world.b_grant = grant_permission(tenant=bob.tenant, user=bob.user, perm="export_audit", actor=Actor.system("t"))
    world.b_open_invitation = Invitation.objects.create(tenant=bob.tenant, email="someone@b.example", role="viewer",
                                                        expires_at=timezone.now() + timedelta(days=1))
    world.b_rollout = make_rollout(world.dep_b, world.versions)
    return world


def _b_values(world, action, answer):
    return {"slug": world.b.slug, "pk": world.dep_b.pk, "instance_id": world.dep_b.instances.get().pk,
            "policy_id": QuotaPolicy.objects.get(tenant=world.b, api_key=None, user=None).pk,
            "member_id": Membership.objects.get(tenant=world.b, user=world.bob.user).pk,
            "invitation_id": world.b_open_invitation.pk, "grant_id": world.b_grant.pk,
            "key_id": ApiKey.objects.filter(tenant=world.b).first().pk,
            "rollout_id": world.b_rollout.pk, "action": action, "answer": answer}


def _ghost_values(action, answer):
    return {"slug": "no-such-tenant", "pk": GHOST, "instance_id": GHOST, "policy_id": GHOST, "member_id": GHOST,
            "invitation_id": GHOST, "grant_id": GHOST, "key_id": GHOST, "rollout_id": GHOST, "action": action,
            "answer": answer}


def _first_choice(route, group):
    match = re.search(rf"\(\?P<{group}>([^)]*)\)", route)
    return match.group(1).split("|")[0] if match else None


def test_every_scoped_route_is_walked():
    names = {name for _, name in SCOPED}
    assert {"console:tenant", "console:deployment", "console:instance-action", "console:member-role",
            "console:invitation-revoke", "console:invitation-answer", "console:key-revoke",
            "console:quota-policy", "console:budget-edit", "console:rollout", "console:rollout-live",
            "console:rollout-start", "console:rollout-action"} <= names


@pytest.mark.parametrize("route,name", SCOPED, ids=[name for _, name in SCOPED])
def test_other_tenants_objects_answer_like_missing_ones(world, route, name):
    client = Client()
    client.force_login(world.alice.user)
    action, answer = _first_choice(route, "action"), _first_choice(route, "answer")
    methods = sorted(method for n, method in CONSOLE_MATRIX if n == name)
    assert methods, name
    for method in methods:
        real = client.generic(method, _fill(route, _b_values(world, action, answer)), _encoded(BODY),
                              content_type="application/x-www-form-urlencoded")
        ghost = client.generic(method, _fill(route, _ghost_values(action, answer)), _encoded(BODY),
                               content_type="application/x-www-form-urlencoded")
        # 404 for both; a platform-only action (suspend) is a 403 before any tenant is looked up, for both
        assert real.status_code == ghost.status_code and real.status_code in (403, 404), (name, method)
    world.dep_b.refresh_from_db()
    assert world.dep_b.status == "active" and world.dep_b.instances.get().state == "ready"
    assert Membership.objects.filter(tenant=world.b).count() == 1
    assert Invitation.objects.get(pk=world.b_open_invitation.pk).status == "pending"
    assert tenant_grants(world.b).filter(pk=world.b_grant.pk).exists()
    world.b_rollout.refresh_from_db()
    assert world.b_rollout.state == "ramping" and world.b_rollout.weight == 0.1
    assert world.dep_b.rollouts.count() == 1


def _encoded(data: dict) -> str:
    from urllib.parse import urlencode

    return urlencode(data)


LIST_PAGES = ["/console/", "/console/tenants/", "/console/keys/", "/console/fleet/", "/console/models/",
              "/console/usage/", "/console/budgets/", "/console/prices/", "/console/audit/", "/console/slow/",
              "/console/invitations/", "/console/audit/export?format=jsonl"]


def test_list_pages_show_nothing_of_tenant_b(world):
    client = Client()
    client.force_login(world.alice.user)
    markers = [world.b.slug, world.bob.user.username, "coder-b", "someone@b.example"]
    for page in LIST_PAGES:
        response = client.get(page)
        assert response.status_code == 200, page
        text = (b"".join(response.streaming_content) if response.streaming else response.content).decode()
        assert not [m for m in markers if m in text], page
