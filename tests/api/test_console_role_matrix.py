"""Role matrix of the console: every route and method, for every kind of signed-in user (docs/console.md).

The console reads under the same rules as the REST API (tenants.roles.READ_RULES, FIELD_RULES), so this
table and tests/api/test_role_matrix.py agree: auditors see the audit trail alone, developers and viewers
the fleet without engine internals. A page one may not open is a 404; an action on a page one can see
but may not take, a 403. tests/api/test_route_inventory.py fails when a console route or method has no
row here. (Signed-out visitors are the inventory's own test: every page sends them to sign in.)
"""
import pytest
from django.test import Client
from django.urls import reverse

from tenants.models import Tenant
from tenants.roles import Role
from tests.api.matrix_world import LOG_TAIL, ROLES, actor, build_world, nobody
from tests.models_registry.registry_helpers import HF_URI

COLUMNS = ("platform", Role.OWNER, Role.ADMIN, Role.DEVELOPER, Role.AUDITOR, Role.VIEWER, "nobody")
INT, NOINT = "200 +internals", "200 -internals"
OPS = (200, 200, 200, 200, 404, 200, 404)  # the operational pages: every role but auditor
MANAGE = (302, 302, 302, 403, 404, 403, 404)  # a write owners and admins make, on a page others may see
PLATFORM = (302,) + (403,) * 6
AUDIT = (200, 200, 200, 404, 200, 404, 404)
A = "tenant-a"


def url(name, *args):
    return reverse(f"console:{name}", args=args)


def _gpu_type(name: str) -> int:
    from capacity.models import GpuType

    return GpuType.objects.get(name=name).pk  # seeded by capacity migration 0001


def _version_form(w):
    prefix = f"m{w.versions.model.pk}"
    return {f"{prefix}-version": "v7", f"{prefix}-artifact_uri": HF_URI, f"{prefix}-quantization": "none",
            f"{prefix}-dtype": "auto"}


# (url name, method, call(client, world, me), outcome, expected per COLUMNS). In the order they run.
ROWS = [
    ("home", "GET", lambda c, w, me: c.get(url("home")), "status", (200, 200, 200, 200, 302, 200, 302)),
    ("no-access", "GET", lambda c, w, me: c.get(url("no-access")), "status", (200,) * 7),
    ("invitations", "GET", lambda c, w, me: c.get(url("invitations")), "status", (200,) * 7),
    ("login", "GET", lambda c, w, me: c.get(url("login")), "status", (302,) * 7),  # signed in already
    # an invitation link: the token is the credential, so a made-up one is the same 404 page for everyone
    ("join", "GET", lambda c, w, me: c.get(url("join", "made-up-token")), "status", (404,) * 7),
    ("join", "POST", lambda c, w, me: c.post(url("join", "made-up-token")), "status", (404,) * 7),
    # single sign-on: an unknown provider is a 404; a callback without the provider's answer fails the sign-in
    ("sso-start", "GET", lambda c, w, me: c.get(url("sso-start", "no-such-idp")), "status", (404,) * 7),
    ("sso-callback", "GET", lambda c, w, me: c.get(url("sso-callback")), "status", (302,) * 7),
    ("tenants", "GET", lambda c, w, me: c.get(url("tenants")), "status", OPS),
    ("tenant", "GET", lambda c, w, me: c.get(url("tenant", A)), "status", OPS),
    ("keys", "GET", lambda c, w, me: c.get(url("keys")), "status", OPS),
    ("fleet", "GET", lambda c, w, me: c.get(url("fleet")), "status", OPS),
    ("deployment", "GET", lambda c, w, me: c.get(url("deployment", w.dep.pk)), "log tail",
     (INT, INT, INT, NOINT, 404, NOINT, 404)),
    ("instances-json", "GET", lambda c, w, me: c.get(url("instances-json", w.dep.pk)), "endpoints",
     (INT, INT, INT, NOINT, 404, NOINT, 404)),
    ("rollout", "GET", lambda c, w, me: c.get(url("rollout", w.rollout.deployment_id)), "status", OPS),
    ("rollout-live", "GET", lambda c, w, me: c.get(url("rollout-live", w.rollout.deployment_id)), "status", OPS),
    ("models", "GET", lambda c, w, me: c.get(url("models")), "artifact", (INT, INT, INT, NOINT, 404, NOINT, 404)),
    ("usage", "GET", lambda c, w, me: c.get(url("usage")), "status", OPS),
    ("budgets", "GET", lambda c, w, me: c.get(url("budgets")), "status", OPS),
    ("budget-edit", "GET", lambda c, w, me: c.get(url("budget-edit", A)), "status",
     (200, 200, 200, 403, 404, 403, 404)),
    ("prices", "GET", lambda c, w, me: c.get(url("prices")), "status", OPS),
    ("audit", "GET", lambda c, w, me: c.get(url("audit")), "status", AUDIT),
    ("audit-export", "GET", lambda c, w, me: c.get(url("audit-export") + "?format=csv"), "status", AUDIT),
    ("audit-manifest", "GET", lambda c, w, me: c.get(url("audit-manifest")), "status", AUDIT),
    ("audit-verify", "GET", lambda c, w, me: c.get(url("audit-verify")), "status", (200,) + (404,) * 6),
    ("audit-verify", "POST", lambda c, w, me: c.post(url("audit-verify")), "status", (200,) + (404,) * 6),
    ("slow", "GET", lambda c, w, me: c.get(url("slow")), "status", (200, 200, 200, 404, 404, 404, 404)),
    ("quota-policy-create", "GET", lambda c, w, me: c.get(url("quota-policy-create", A)), "status",
     (200, 200, 200, 403, 404, 403, 404)),
    ("quota-policy", "GET", lambda c, w, me: c.get(url("quota-policy", A, w.user_quota.pk)), "status",
     (200, 200, 200, 403, 404, 403, 404)),
    # writes, each on its own target
    ("login", "POST", lambda c, w, me: c.post(url("login"), {"username": "x", "password": "y"}), "status", (302,) * 7),
    ("budget-edit", "POST", lambda c, w, me: c.post(url("budget-edit", A), {"monthly_token_budget": "1000"}),
     "status", MANAGE),
    ("quota-policy-create", "POST", lambda c, w, me: c.post(url("quota-policy-create", A), {
        "subject": f"user:{w.target_dev.user_id}", "requests_per_minute": "5"}), "status", MANAGE),
    ("quota-policy", "POST", lambda c, w, me: c.post(url("quota-policy", A, w.user_quota.pk),
                                                     {"requests_per_minute": "7"}), "status", MANAGE),
    ("quota-policy-delete", "POST", lambda c, w, me: c.post(url("quota-policy-delete", A, w.user_quota.pk)),
     "status", MANAGE),
    ("quota-update", "POST", lambda c, w, me: c.post(url("quota-update", A), {"requests_per_minute": "90"}),
     "status", MANAGE),
    ("tenant-supersession", "POST", lambda c, w, me: c.post(url("tenant-supersession", A), {}), "status", MANAGE),
    ("member-add", "POST", lambda c, w, me: c.post(url("member-add", A), {"email": "c@example.test", "role": "viewer"}),
     "status", MANAGE),
    ("member-role", "POST", lambda c, w, me: c.post(url("member-role", A, w.target_dev.pk), {"role": "viewer"}),
     "status", MANAGE),
    ("member-remove", "POST", lambda c, w, me: c.post(url("member-remove", A, w.target_viewer.pk)), "status", MANAGE),
    ("grant-create", "POST", lambda c, w, me: c.post(url("grant-create", A), {
        "member": w.target_dev.user_id, "permission": "export_audit"}), "status", MANAGE),
    ("grant-revoke", "POST", lambda c, w, me: c.post(url("grant-revoke", A, w.grant.pk)), "status", MANAGE),
    ("invitation-revoke", "POST", lambda c, w, me: c.post(url("invitation-revoke", A, w.invitation.pk)), "status",
     MANAGE),
    ("invitation-answer", "POST", lambda c, w, me: c.post(url("invitation-answer", me.invitation.pk, "decline")),
     "status", (302,) * 7),
    # keys: a developer's own inference keys only; viewers read, auditors see no keys page at all
    ("key-create", "POST", lambda c, w, me: c.post(url("key-create"), {
        "tenant": A, "name": "ide", "scopes": ["inference"], "role": "developer"}), "status",
     (200, 200, 200, 200, 404, 400, 404)),
    ("key-revoke", "POST", lambda c, w, me: c.post(url("key-revoke", me.own_keys[0].pk)), "status",
     (302, 302, 302, 302, 404, 403, 404)),
    ("key-rotate", "POST", lambda c, w, me: c.post(url("key-rotate", me.own_keys[1].pk)), "status",
     (200, 200, 200, 200, 404, 403, 404)),
    # platform keys: platform staff only; everyone else finds no such page or key
    ("platform-key-create", "POST", lambda c, w, me: c.post(url("platform-key-create"), {"platform-name": "ci"}),
     "status", (200,) + (404,) * 6),
    ("key-revoke", "POST", lambda c, w, me: c.post(url("key-revoke", w.platform_keys[0].pk)), "status",
     (302,) + (404,) * 6),
    ("key-rotate", "POST", lambda c, w, me: c.post(url("key-rotate", w.platform_keys[1].pk)), "status",
     (200,) + (404,) * 6),
    # the fleet: owners and admins of the tenant, platform staff everywhere
    ("deploy", "POST", lambda c, w, me: c.post(url("deploy"), {
        "tenant": A, "name": "console-new", "model_version": w.versions.main.pk, "runtime_backend": "simulator",
        "min_replicas": 1, "max_replicas": 1, "warm_pool_size": 0, "routing_policy": "round_robin"}), "status", MANAGE),
    ("scale", "POST", lambda c, w, me: c.post(url("scale", w.dep.pk), {"min_replicas": 1, "max_replicas": 2,
                                                                     "warm_pool_size": 0}), "status", MANAGE),
    ("instance-action", "POST", lambda c, w, me: c.post(url("instance-action", w.dep.pk, w.instances[0].pk, "drain")),
     "status", MANAGE),
    ("scaling", "POST", lambda c, w, me: c.post(url("scaling", w.dep.pk), {
        "enabled": "on", "queue_per_instance": 8, "kv_cache_usage": 0.9, "up_window_seconds": 20,
        "low_water_per_instance": 1, "idle_window_seconds": 300, "zero_after_idle_seconds": 900,
        "cooldown_up_seconds": 60, "cooldown_down_seconds": 300, "max_step": 2, "wake_timeout_seconds": 120}),
     "status", MANAGE),
    ("routing", "POST", lambda c, w, me: c.post(url("routing", w.dep.pk), {"routing_policy": "least_outstanding"}),
     "status", MANAGE),
    # rollouts: as the REST API (rollouts/api/views.py): who manages the deployment starts and steers them
    ("rollout-start", "POST", lambda c, w, me: c.post(url("rollout-start", w.dep.pk), {
        "to_version": w.versions.next.pk, "strategy": "canary", "sticky_by": "session", "grace_seconds": 60}),
     "status", MANAGE),
    ("rollout-action", "POST", lambda c, w, me: c.post(url("rollout-action", w.rollout.deployment_id, w.rollout.pk,
                                                           "pause")), "status", MANAGE),
    ("rollout-action", "POST", lambda c, w, me: c.post(url("rollout-action", w.rollout.deployment_id, w.rollout.pk,
                                                           "roll-back")), "status", MANAGE),
    ("deployment-grant-create", "POST", lambda c, w, me: c.post(url("deployment-grant-create", w.dep.pk), {
        "member": w.target_dev.user_id, "permission": "change_deployment"}), "status", MANAGE),
    ("deployment-grant-revoke", "POST", lambda c, w, me: c.post(url("deployment-grant-revoke", w.dep.pk,
                                                                    w.dep_grant.pk)), "status", MANAGE),
    ("deployment-delete", "POST", lambda c, w, me: c.post(url("deployment-delete", w.doomed.pk)), "status", MANAGE),
    # the registry, GPU prices and tenants themselves: platform staff
    ("model-create", "POST", lambda c, w, me: c.post(url("model-create"), {"name": "console-new", "family": "other"}),
     "status", PLATFORM),
    ("version-create", "POST", lambda c, w, me: c.post(url("version-create", w.versions.model.pk), _version_form(w)),
     "status", PLATFORM),
    ("version-action", "POST", lambda c, w, me: c.post(url("version-action", w.versions.to_publish.pk, "publish")),
     "status", PLATFORM),
    ("price-create", "POST", lambda c, w, me: c.post(url("price-create"), {
        "gpu_type": "H200", "unit": "gpu", "hourly_usd": "3.1"}), "status", (302, 403, 403, 403, 404, 403, 404)),
    ("capacity", "GET", lambda c, w, me: c.get(url("capacity")), "status", OPS),
    ("gpu-type-create", "POST", lambda c, w, me: c.post(url("gpu-type-create"), {"name": "B200", "memory_mib": 183359}),
     "status", (302, 403, 403, 403, 404, 403, 404)),
    ("gpu-type-delete", "POST", lambda c, w, me: c.post(url("gpu-type-delete", _gpu_type("H200"))), "status",
     (302, 403, 403, 403, 404, 403, 404)),
    ("tenant-create", "POST", lambda c, w, me: c.post(url("tenant-create"), {
        "slug": "fresh", "name": "Fresh", "region": "local", "isolation": "shared",
        "admin_email": "owner@fresh.test"}), "status", PLATFORM),
    ("tenant-status", "POST", lambda c, w, me: c.post(url("tenant-status", A, "suspend")), "status", PLATFORM),
    ("tenant-status", "POST", lambda c, w, me: c.post(url("tenant-status", A, "activate")), "status", PLATFORM),
    ("logout", "POST", lambda c, w, me: c.post(url("logout")), "status", (302,) * 7),  # last: it signs out
]
CONSOLE_MATRIX = {(f"console:{name}", method) for name, method, *_ in ROWS}


def _internals(shown: bool) -> str:
    return INT if shown else NOINT


OUTCOMES = {
    "status": lambda r: r.status_code,
    "log tail": lambda r: _internals(LOG_TAIL.splitlines()[0].encode() in r.content),
    "endpoints": lambda r: _internals(all(i["endpoint"] for i in r.json()["instances"])),
    "artifact": lambda r: _internals(HF_URI[:30].encode() in r.content),
}


def run_column(client, world, me) -> dict:
    mismatches = {}
    for n, (name, method, call, outcome, expected) in enumerate(ROWS):
        response = call(client, world, me)
        seen = OUTCOMES[outcome](response) if response.status_code == 200 else response.status_code
        wanted = expected[COLUMNS.index(me.column)]
        if seen != wanted:
            mismatches[f"{name} {method} #{n}"] = (seen, wanted)
    return mismatches


def test_every_row_has_a_cell_per_column():
    assert all(len(row[4]) == len(COLUMNS) for row in ROWS)


@pytest.fixture
def world(alice, bob, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return build_world(alice, bob)


def _signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("column", COLUMNS)
def test_console_role_matrix(world, charlie, column):
    if column == "nobody":
        me = nobody(world)
        me.own_keys = world.others_keys * 2  # someone else's keys: never theirs to revoke or rotate
    else:
        me = actor(world, column, staff=charlie.user)
    me.column = column
    assert run_column(_signed_in(me.user), world, me) == {}
    assert Tenant.objects.get(pk=world.a.pk).status == "active"
    assert Tenant.objects.filter(slug="fresh").exists() == (column == "platform")


def test_the_tables_have_the_same_roles():
    assert set(ROLES) < set(COLUMNS)
