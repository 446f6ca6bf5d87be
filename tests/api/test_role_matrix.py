"""Role matrix of the REST API: every route and method, for every kind of caller (docs/roles.md).

Columns: platform staff (console session); the five tenant roles, each through a console session and
through an admin-scoped key capped at the role (the two must answer alike); and an owner's key that
holds only the `audit:read` scope. `PERMISSIONS` restates ROLE_PERMISSIONS (a change there must be a
deliberate change here too). tests/api/test_route_inventory.py fails when a route or method of the API
has no row here, or a row names one that no longer exists.

A cell is a status code, or for reads whose rows or fields depend on the caller a label:
"200 tenant-a" (the tenants whose rows came back), "+internals" / "-internals" (whether engine log
tails or artifact URIs were shown or null), "200 beyond A" (rows of other tenants too: platform only).
"""
import pytest

from apikeys.scopes import SCOPE_PERMISSIONS, Scope
from tenants.models import Tenant
from tenants.roles import ROLE_PERMISSIONS, Perm, Role
from tests.api.conftest import client_for
from tests.api.matrix_world import ROLES, actor, build_world
from tests.conftest import bearer
from tests.factories import make_key

P = Perm
OPERATIONAL = {P.VIEW_FLEET, P.VIEW_REGISTRY, P.VIEW_USAGE}
PERMISSIONS = {
    Role.OWNER: set(Perm.values),
    Role.ADMIN: set(Perm.values),
    Role.DEVELOPER: {P.VIEW_TENANT, P.VIEW_MEMBERS, P.MANAGE_OWN_KEYS, P.VIEW_QUOTAS} | OPERATIONAL,
    Role.AUDITOR: {P.VIEW_TENANT, P.VIEW_AUDIT, P.EXPORT_AUDIT},
    Role.VIEWER: {P.VIEW_TENANT, P.VIEW_MEMBERS, P.VIEW_KEYS, P.VIEW_QUOTAS} | OPERATIONAL,
}
SCOPES = {
    Scope.ADMIN: set(Perm.values),
    Scope.AUDIT_READ: {P.VIEW_TENANT, P.VIEW_AUDIT, P.EXPORT_AUDIT},
    Scope.INFERENCE: set(),
}

COLUMNS = ("platform", Role.OWNER, Role.ADMIN, Role.DEVELOPER, Role.AUDITOR, Role.VIEWER, "audit key")
A, AB = "200 tenant-a", "200 tenant-a,tenant-b"
BEYOND = "200 beyond A"
INT, NOINT = "200 +internals", "200 -internals"
FLEET_ALL, FLEET_A, FLEET_A_NOINT = "200 shared,tenant-a,tenant-b +internals", f"{A} +internals", f"{A} -internals"
T = "/api/v1/tenants/tenant-a"
U = "/api/v1/usage"
C = "/api/v1/capacity"


def _gpu_type(name: str) -> int:
    from capacity.models import GpuType

    return GpuType.objects.get(name=name).pk  # seeded by capacity migration 0001


def _versions(w, version=None):
    base = f"/api/v1/models/{w.versions.model.pk}/versions/"
    return f"{base}{version.pk}/" if version else base


# (url name, method, call(client, world, me), outcome, expected per COLUMNS). In the order they run.
ROWS = [
    ("tenant-list", "GET", lambda c, w, me: c.get("/api/v1/tenants/"), "slugs", (AB, A, A, A, A, A, A)),
    ("tenant-detail", "GET", lambda c, w, me: c.get(f"{T}/"), "status", (200,) * 7),
    ("tenant-detail", "PATCH", lambda c, w, me: c.patch(f"{T}/", {"name": "Renamed"}, format="json"), "status",
     (200, 200, 200, 403, 403, 403, 403)),
    ("tenant-list", "POST", lambda c, w, me: c.post("/api/v1/tenants/", {
        "slug": "fresh", "name": "Fresh", "admin_email": "owner@fresh.test"}, format="json"), "status",
     (201,) + (403,) * 6),
    # members and invitations
    ("member-list", "GET", lambda c, w, me: c.get(f"{T}/members/"), "status", (200, 200, 200, 200, 403, 200, 403)),
    ("member-detail", "GET", lambda c, w, me: c.get(f"{T}/members/{w.target_dev.pk}/"), "status",
     (200, 200, 200, 200, 403, 200, 403)),
    ("member-list", "POST", lambda c, w, me: c.post(f"{T}/members/", {"email": "new@example.test", "role": "viewer"},
                                                    format="json"), "status", (201, 201, 201, 403, 403, 403, 403)),
    ("member-detail", "PATCH", lambda c, w, me: c.patch(f"{T}/members/{w.target_dev.pk}/", {"role": "viewer"},
                                                        format="json"), "status", (200, 200, 200, 403, 403, 403, 403)),
    ("member-detail", "DELETE", lambda c, w, me: c.delete(f"{T}/members/{w.target_viewer.pk}/"), "status",
     (204, 204, 204, 403, 403, 403, 403)),
    ("invitation-list", "GET", lambda c, w, me: c.get(f"{T}/invitations/"), "status",
     (200, 200, 200, 200, 403, 200, 403)),
    ("invitation-detail", "GET", lambda c, w, me: c.get(f"{T}/invitations/{w.invitation.pk}/"), "status",
     (200, 200, 200, 200, 403, 200, 403)),
    ("invitation-list", "POST", lambda c, w, me: c.post(f"{T}/invitations/", {"email": "two@example.test",
                                                                              "role": "viewer"}, format="json"),
     "status", (201, 201, 201, 403, 403, 403, 403)),
    ("invitation-detail", "DELETE", lambda c, w, me: c.delete(f"{T}/invitations/{w.invitation.pk}/"), "status",
     (204, 204, 204, 403, 403, 403, 403)),
    # per-object grants: read with the members, written by who manages them (up to what they hold)
    ("grant-list", "GET", lambda c, w, me: c.get(f"{T}/grants/"), "status", (200, 200, 200, 200, 403, 200, 403)),
    ("grant-detail", "GET", lambda c, w, me: c.get(f"{T}/grants/{w.grant.pk}/"), "status",
     (200, 200, 200, 200, 403, 200, 403)),
    ("grant-list", "POST", lambda c, w, me: c.post(f"{T}/grants/", {"user_id": w.target_dev.user_id,
                                                                   "permission": "export_audit"}, format="json"),
     "status", (201, 201, 201, 403, 403, 403, 403)),
    ("grant-detail", "DELETE", lambda c, w, me: c.delete(f"{T}/grants/{w.grant.pk}/"), "status",
     (204, 204, 204, 403, 403, 403, 403)),
    # API keys: developers see and manage only their own; personal keys are minted by their owner only
    ("api-key-list", "GET", lambda c, w, me: c.get(f"{T}/keys/"), "status", (200, 200, 200, 200, 403, 200, 403)),
    ("api-key-detail", "GET", lambda c, w, me: c.get(f"{T}/keys/{w.others_keys[0].pk}/"), "status",
     (200, 200, 200, 404, 403, 200, 403)),
    ("api-key-list", "POST", lambda c, w, me: c.post(f"{T}/keys/", {"name": "ide", "scopes": ["inference"]},
                                                     format="json"), "status", (201, 201, 201, 201, 403, 403, 403)),
    ("api-key-list", "POST", lambda c, w, me: c.post(f"{T}/keys/", {"name": "for dev", "scopes": ["admin"],
                                                                    "user_id": w.target_dev.user_id}, format="json"),
     "status", (403,) * 7),
    ("api-key-revoke", "POST", lambda c, w, me: c.post(f"{T}/keys/{me.own_keys[0].pk}/revoke/"), "status",
     (200, 200, 200, 200, 403, 403, 403)),
    ("api-key-rotate", "POST", lambda c, w, me: c.post(f"{T}/keys/{me.own_keys[1].pk}/rotate/", {}, format="json"),
     "status", (201, 201, 201, 201, 403, 403, 403)),
    ("api-key-detail", "DELETE", lambda c, w, me: c.delete(f"{T}/keys/{me.own_keys[2].pk}/"), "status",
     (204, 204, 204, 204, 403, 403, 403)),
    ("api-key-revoke", "POST", lambda c, w, me: c.post(f"{T}/keys/{w.others_keys[0].pk}/revoke/"), "status",
     (200, 200, 200, 404, 403, 403, 403)),
    ("api-key-rotate", "POST", lambda c, w, me: c.post(f"{T}/keys/{w.others_keys[1].pk}/rotate/", {}, format="json"),
     "status", (201, 201, 201, 404, 403, 403, 403)),
    # platform keys: platform admins only (a tenant role, however high, is no platform power)
    ("platform-key-list", "GET", lambda c, w, me: c.get("/api/v1/platform/keys/"), "status", (200,) + (403,) * 6),
    ("platform-key-detail", "GET", lambda c, w, me: c.get(f"/api/v1/platform/keys/{w.platform_keys[0].pk}/"),
     "status", (200,) + (403,) * 6),
    ("platform-key-list", "POST", lambda c, w, me: c.post("/api/v1/platform/keys/", {"name": "ci"}, format="json"),
     "status", (201,) + (403,) * 6),
    ("platform-key-revoke", "POST", lambda c, w, me: c.post(f"/api/v1/platform/keys/{w.platform_keys[0].pk}/revoke/"),
     "status", (200,) + (403,) * 6),
    ("platform-key-rotate", "POST", lambda c, w, me: c.post(f"/api/v1/platform/keys/{w.platform_keys[1].pk}/rotate/",
                                                            {"grace_seconds": 0}, format="json"),
     "status", (201,) + (403,) * 6),
    ("platform-key-detail", "DELETE", lambda c, w, me: c.delete(f"/api/v1/platform/keys/{w.platform_keys[2].pk}/"),
     "status", (204,) + (403,) * 6),
    # quotas
    ("quota-list", "GET", lambda c, w, me: c.get(f"{T}/quotas/"), "status", (200, 200, 200, 200, 403, 200, 403)),
    ("quota-detail", "GET", lambda c, w, me: c.get(f"{T}/quotas/{w.tenant_quota.pk}/"), "status",
     (200, 200, 200, 200, 403, 200, 403)),
    ("quota-list", "POST", lambda c, w, me: c.post(f"{T}/quotas/", {"user_id": w.target_dev.user_id,
                                                                    "requests_per_minute": 5}, format="json"),
     "status", (201, 201, 201, 403, 403, 403, 403)),
    ("quota-detail", "PATCH", lambda c, w, me: c.patch(f"{T}/quotas/{w.tenant_quota.pk}/", {"tokens_per_minute": 1000},
                                                       format="json"), "status", (200, 200, 200, 403, 403, 403, 403)),
    ("quota-detail", "DELETE", lambda c, w, me: c.delete(f"{T}/quotas/{w.user_quota.pk}/"), "status",
     (204, 204, 204, 403, 403, 403, 403)),
    # the audit trail
    ("audit-event-list", "GET", lambda c, w, me: c.get("/api/v1/audit/events/?page_size=200"), "audit rows",
     (BEYOND, A, A, 403, A, 403, A)),
    ("audit-event-detail", "GET", lambda c, w, me: c.get(f"/api/v1/audit/events/{w.a_event}/"), "status",
     (200, 200, 200, 403, 200, 403, 200)),
    ("audit-export", "GET", lambda c, w, me: c.get("/api/v1/audit/export"), "export rows",
     (BEYOND, A, A, 403, A, 403, A)),
    ("audit-export-manifest", "GET", lambda c, w, me: c.get("/api/v1/audit/export/manifest"), "status",
     (200, 200, 200, 403, 200, 403, 200)),
    ("audit-verify", "GET", lambda c, w, me: c.get("/api/v1/audit/verify"), "status", (200,) + (403,) * 6),
    ("audit-verify", "POST", lambda c, w, me: c.post("/api/v1/audit/verify", {"since_manifest": "x"}, format="json"),
     "status", (400,) + (403,) * 6),
    # the fleet: auditors and audit:read keys read none of it; engine internals for owners and admins only
    ("deployment-list", "GET", lambda c, w, me: c.get("/api/v1/deployments/"), "fleet rows",
     (FLEET_ALL, FLEET_A, FLEET_A, FLEET_A_NOINT, 403, FLEET_A_NOINT, 403)),
    ("deployment-detail", "GET", lambda c, w, me: c.get(f"/api/v1/deployments/{w.dep.pk}/"), "fleet fields",
     (INT, INT, INT, NOINT, 403, NOINT, 403)),
    ("deployment-scale", "POST", lambda c, w, me: c.post(f"/api/v1/deployments/{w.dep.pk}/scale/",
                                                         {"max_replicas": 3}, format="json"), "status",
     (200, 200, 200, 403, 403, 403, 403)),
    ("deployment-scaling", "GET", lambda c, w, me: c.get(f"/api/v1/deployments/{w.dep.pk}/scaling/"), "status",
     (200, 200, 200, 200, 403, 200, 403)),
    ("deployment-scaling", "PUT", lambda c, w, me: c.put(f"/api/v1/deployments/{w.dep.pk}/scaling/",
                                                         {"enabled": True}, format="json"), "status",
     (200, 200, 200, 403, 403, 403, 403)),
    ("deployment-routing", "GET", lambda c, w, me: c.get(f"/api/v1/deployments/{w.dep.pk}/routing/"), "status",
     (200, 200, 200, 200, 403, 200, 403)),
    ("deployment-routing", "PUT", lambda c, w, me: c.put(f"/api/v1/deployments/{w.dep.pk}/routing/",
                                                         {"routing_policy": "round_robin"}, format="json"), "status",
     (200, 200, 200, 403, 403, 403, 403)),
    ("deployment-scaling-decisions", "GET",
     lambda c, w, me: c.get(f"/api/v1/deployments/{w.dep.pk}/scaling/decisions/"),
     "status", (200, 200, 200, 200, 403, 200, 403)),
    ("deployment-scaling-samples", "GET", lambda c, w, me: c.get(f"/api/v1/deployments/{w.dep.pk}/scaling/samples/"),
     "status", (200, 200, 200, 200, 403, 200, 403)),
    ("deployment-drain", "POST", lambda c, w, me: c.post(
        f"/api/v1/deployments/{w.dep.pk}/instances/{w.instances[0].pk}/drain/"), "status",
     (202, 202, 202, 403, 403, 403, 403)),
    ("deployment-restart", "POST", lambda c, w, me: c.post(
        f"/api/v1/deployments/{w.dep.pk}/instances/{w.instances[1].pk}/restart/"), "status",
     (202, 202, 202, 403, 403, 403, 403)),
    # per-object grants on one deployment: read with the members, written by who manages them
    ("deployment-grant-list", "GET", lambda c, w, me: c.get(f"/api/v1/deployments/{w.dep.pk}/grants/"), "status",
     (200, 200, 200, 200, 403, 200, 403)),
    ("deployment-grant-detail", "GET",
     lambda c, w, me: c.get(f"/api/v1/deployments/{w.dep.pk}/grants/{w.dep_grant.pk}/"), "status",
     (200, 200, 200, 200, 403, 200, 403)),
    ("deployment-grant-list", "POST", lambda c, w, me: c.post(f"/api/v1/deployments/{w.dep.pk}/grants/", {
        "user_id": w.target_dev.user_id, "permission": "change_deployment"}, format="json"), "status",
     (201, 201, 201, 403, 403, 403, 403)),
    ("deployment-grant-detail", "DELETE",
     lambda c, w, me: c.delete(f"/api/v1/deployments/{w.dep.pk}/grants/{w.dep_grant.pk}/"), "status",
     (204, 204, 204, 403, 403, 403, 403)),
    ("deployment-detail", "DELETE", lambda c, w, me: c.delete(f"/api/v1/deployments/{w.doomed.pk}/"), "status",
     (202, 202, 202, 403, 403, 403, 403)),
    ("deployment-list", "POST", lambda c, w, me: c.post("/api/v1/deployments/", {
        "tenant": "tenant-a", "name": "new-one", "model_version": w.versions.main.pk, "runtime_backend": "simulator"},
        format="json"), "status", (201, 201, 201, 403, 403, 403, 403)),
    # rollouts: read with the fleet, started and steered by who manages it
    ("rollout-list", "GET", lambda c, w, me: c.get("/api/v1/rollouts/"), "status", (200, 200, 200, 200, 403, 200, 403)),
    ("rollout-detail", "GET", lambda c, w, me: c.get(f"/api/v1/rollouts/{w.rollout.pk}/"), "status",
     (200, 200, 200, 200, 403, 200, 403)),
    ("rollout-list", "POST", lambda c, w, me: c.post("/api/v1/rollouts/", {
        "deployment": w.dep.pk, "to_version": w.versions.next.pk}, format="json"), "status",
     (201, 201, 201, 403, 403, 403, 403)),
    ("rollout-pause", "POST", lambda c, w, me: c.post(f"/api/v1/rollouts/{w.rollout.pk}/pause/"), "status",
     (200, 200, 200, 403, 403, 403, 403)),
    ("rollout-resume", "POST", lambda c, w, me: c.post(f"/api/v1/rollouts/{w.rollout.pk}/resume/"), "status",
     (200, 200, 200, 403, 403, 403, 403)),
    ("rollout-promote", "POST", lambda c, w, me: c.post(f"/api/v1/rollouts/{w.rollout.pk}/promote/"), "status",
     (200, 200, 200, 403, 403, 403, 403)),
    ("rollout-roll-back", "POST", lambda c, w, me: c.post(f"/api/v1/rollouts/{w.rollout.pk}/roll-back/", {},
                                                          format="json"), "status",
     (200, 200, 200, 403, 403, 403, 403)),
    # the registry: read by who works with the fleet (internals: owners and admins), written by platform staff
    ("model-list", "GET", lambda c, w, me: c.get("/api/v1/models/"), "status", (200, 200, 200, 200, 403, 200, 403)),
    ("model-detail", "GET", lambda c, w, me: c.get(f"/api/v1/models/{w.versions.model.pk}/"), "status",
     (200, 200, 200, 200, 403, 200, 403)),
    ("model-list", "POST", lambda c, w, me: c.post("/api/v1/models/", {"name": "brand-new"}, format="json"), "status",
     (201,) + (403,) * 6),
    ("model-detail", "PATCH", lambda c, w, me: c.patch(f"/api/v1/models/{w.versions.model.pk}/",
                                                       {"description": "x"}, format="json"), "status",
     (200,) + (403,) * 6),
    ("model-version-list", "GET", lambda c, w, me: c.get(_versions(w)), "version rows",
     (INT, INT, INT, NOINT, 403, NOINT, 403)),
    ("model-version-detail", "GET", lambda c, w, me: c.get(_versions(w, w.versions.main)), "version fields",
     (INT, INT, INT, NOINT, 403, NOINT, 403)),
    ("model-version-list", "POST", lambda c, w, me: c.post(_versions(w), {
        "version": "v9", "artifact_uri": "hf://org/repo@0123456789abcdef0123456789abcdef01234567"}, format="json"),
     "status", (201,) + (403,) * 6),
    ("model-version-detail", "PATCH", lambda c, w, me: c.patch(_versions(w, w.versions.draft), {"checksum": "abc"},
                                                               format="json"), "status", (200,) + (403,) * 6),
    ("model-version-publish", "POST", lambda c, w, me: c.post(_versions(w, w.versions.to_publish) + "publish/"),
     "status", (200,) + (403,) * 6),
    ("model-version-deprecate", "POST", lambda c, w, me: c.post(_versions(w, w.versions.to_deprecate) + "deprecate/"),
     "status", (200,) + (403,) * 6),
    ("model-version-retire", "POST", lambda c, w, me: c.post(_versions(w, w.versions.to_retire) + "retire/"),
     "status", (200,) + (403,) * 6),
    # usage, cost, budget state and GPU prices
    ("usage-series", "GET", lambda c, w, me: c.get(f"{U}/series"), "status", (200, 200, 200, 200, 403, 200, 403)),
    ("usage-breakdown", "GET", lambda c, w, me: c.get(f"{U}/breakdown"), "status", (200, 200, 200, 200, 403, 200, 403)),
    ("usage-costs", "GET", lambda c, w, me: c.get(f"{U}/costs"), "status", (200, 200, 200, 200, 403, 200, 403)),
    ("usage-budgets", "GET", lambda c, w, me: c.get(f"{U}/budgets"), "budget rows", (AB, A, A, A, 403, A, 403)),
    ("gpu-price-list", "GET", lambda c, w, me: c.get(f"{U}/gpu-prices/"), "status",
     (200, 200, 200, 200, 403, 200, 403)),
    ("gpu-price-list", "POST", lambda c, w, me: c.post(f"{U}/gpu-prices/", {"gpu_type": "H100", "hourly_usd": "2.5"},
                                                       format="json"), "status", (201,) + (403,) * 6),
    # capacity planning: GPU types read like GPU prices and edited by platform staff; plans under the
    # registry's read rule; advice under the fleet's
    ("gpu-type-list", "GET", lambda c, w, me: c.get(f"{C}/gpu-types/"), "status", (200, 200, 200, 200, 403, 200, 403)),
    ("gpu-type-detail", "GET", lambda c, w, me: c.get(f"{C}/gpu-types/{_gpu_type('L4')}/"), "status",
     (200, 200, 200, 200, 403, 200, 403)),
    ("gpu-type-list", "POST", lambda c, w, me: c.post(f"{C}/gpu-types/", {"name": "B200", "memory_mib": 183359},
                                                      format="json"), "status", (201,) + (403,) * 6),
    ("gpu-type-detail", "PATCH", lambda c, w, me: c.patch(f"{C}/gpu-types/{_gpu_type('L4')}/", {"note": "ours"},
                                                          format="json"), "status", (200,) + (403,) * 6),
    ("gpu-type-detail", "DELETE", lambda c, w, me: c.delete(f"{C}/gpu-types/{_gpu_type('A10G')}/"), "status",
     (204,) + (403,) * 6),
    ("capacity-plans", "POST", lambda c, w, me: c.post(f"{C}/plans/", {
        "config": {"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 128, "vocab_size": 256},
        "gpu_type": "L4", "context_length": 1024}, format="json"), "status", (200, 200, 200, 200, 403, 200, 403)),
    ("capacity-advice-detail", "GET", lambda c, w, me: c.get(f"{C}/advice/{w.dep.pk}/"), "status",
     (200, 200, 200, 200, 403, 200, 403)),
    # the API's description is public
    ("schema", "GET", lambda c, w, me: c.get("/api/schema/"), "status", (200,) * 7),
    ("swagger-ui", "GET", lambda c, w, me: c.get("/api/docs/"), "status", (200,) * 7),
    # last: the tenant's status, and deleting it
    ("tenant-suspend", "POST", lambda c, w, me: c.post(f"{T}/suspend/"), "status", (200,) + (403,) * 6),
    ("tenant-activate", "POST", lambda c, w, me: c.post(f"{T}/activate/"), "status", (200,) + (403,) * 6),
    # A tenant with deployments is not deleted (their engines are drained first): 400, not a 500.
    ("tenant-detail", "DELETE", lambda c, w, me: c.delete(f"{T}/"), "status", (400,) + (403,) * 6),
    ("tenant-detail", "DELETE", lambda c, w, me: c.delete("/api/v1/tenants/fresh/"), "status", (204,) + (404,) * 6),
]
API_MATRIX = {(name, method) for name, method, *_ in ROWS}


def _results(response) -> list:
    body = response.json()
    return body["results"] if isinstance(body, dict) and "results" in body else body.get("rows", [])


def _slugs(rows, field) -> str:
    return ",".join(sorted({row[field] or "shared" for row in rows}))


def _internals(values) -> str:
    shown = {value is not None for value in values}
    return {frozenset({True}): "+internals", frozenset({False}): "-internals"}.get(frozenset(shown), f"mixed {shown}")


def _audit_label(tenant_slugs) -> str:
    return A if set(tenant_slugs) == {"tenant-a"} else BEYOND if tenant_slugs else "200 and empty"


def _export_slugs(response) -> list:
    import json

    lines = [line for line in b"".join(response.streaming_content).decode().splitlines() if line]
    return [json.loads(line)["tenant_slug"] for line in lines]


OUTCOMES = {
    "status": lambda r: r.status_code,
    "slugs": lambda r: f"200 {_slugs(_results(r), 'slug')}",
    "audit rows": lambda r: _audit_label([row["tenant_slug"] for row in _results(r)]),
    "export rows": lambda r: _audit_label(_export_slugs(r)),
    "fleet rows": lambda r: f"200 {_slugs(_results(r), 'tenant')} "
                            f"{_internals(i['log_tail'] for d in _results(r) for i in d['instances'])}",
    "fleet fields": lambda r: f"200 {_internals(v for i in r.json()['instances'] for v in (i['log_tail'], i['pid']))}",
    "version rows": lambda r: f"200 {_internals(v['artifact_uri'] for v in _results(r))}",
    "version fields": lambda r: f"200 {_internals([r.json()['artifact_uri'], r.json()['engine_args']])}",
    "budget rows": lambda r: f"200 {_slugs(_results(r), 'tenant')}",
}


def run_column(client, world, me) -> list:
    observed = []
    for _name, _method, call, outcome, _ in ROWS:
        response = call(client, world, me)
        observed.append(OUTCOMES[outcome](response) if response.status_code == 200 else response.status_code)
    return observed


def expected_column(column: str) -> list:
    return [row[4][COLUMNS.index(column)] for row in ROWS]


def _compare(observed, column) -> dict:
    """Only the mismatches, by route, method and what the row does."""
    return {f"{name} {method} #{n}": (seen, wanted) for n, ((name, method, *_), seen, wanted)
            in enumerate(zip(ROWS, observed, expected_column(column))) if seen != wanted}


def test_role_permission_table_is_the_documented_one():
    assert {role: set(perms) for role, perms in ROLE_PERMISSIONS.items()} == PERMISSIONS
    assert {scope: set(perms) for scope, perms in SCOPE_PERMISSIONS.items()} == SCOPES


def test_every_row_has_a_cell_per_column():
    assert all(len(row[4]) == len(COLUMNS) for row in ROWS)


@pytest.fixture
def world(alice, bob):
    return build_world(alice, bob)


@pytest.mark.parametrize("cred", ["api_key", "session"])
@pytest.mark.parametrize("role", ROLES)
def test_role_matrix(world, role, cred):
    me = actor(world, role)
    assert _compare(run_column(client_for(cred, me.user, me.raw), world, me), role) == {}
    assert Tenant.objects.filter(pk=world.a.pk, status="active").exists()
    assert not Tenant.objects.filter(slug="fresh").exists()


def test_platform_staff_column(world, charlie):
    me = actor(world, "platform", staff=charlie.user)
    assert _compare(run_column(client_for("session", me.user, None), world, me), "platform") == {}
    assert Tenant.objects.filter(pk=world.a.pk).exists() and not Tenant.objects.filter(slug="fresh").exists()


def test_platform_key_column(world, charlie):
    """A platform key alone (no session, no CSRF token) answers every route as platform staff's session does."""
    me = actor(world, "platform", staff=charlie.user)
    platform_key = make_key(None, charlie.user, name="automation").raw
    assert _compare(run_column(bearer(platform_key), world, me), "platform") == {}
    assert Tenant.objects.filter(pk=world.a.pk).exists() and not Tenant.objects.filter(slug="fresh").exists()


def test_audit_read_key_column(world):
    """An owner's key with only `audit:read` reads the audit trail — not the fleet, its log tails or usage."""
    me = actor(world, Role.OWNER)
    assert _compare(run_column(bearer(me.audit_raw), world, me), "audit key") == {}
