"""The write services of every app, found on disk, and what each must append to the audit chain.

`service_modules()` finds every `services.py` (or `services/` package) of the repository's apps, so a
new app's services are covered without editing this file; the tests then require each public function
to be a CASE, a READ_ONLY helper or a NOT_AUDITED write (with its reason).
"""
import importlib
import inspect
import pkgutil
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from types import ModuleType, SimpleNamespace

from django.utils import timezone

import apikeys.services as apikeys
import audit.services as audit
import capacity.services as capacity
import fleet.services as fleet
import models_registry.services as registry
import quotas.services as quotas
import rollouts.services as rollouts
import sso.services as sso
import tenants.services as tenants
import usage.services as usage
from audit.actor import Actor
from audit.export import ManifestBuilder
from sso.providers import Provider
from tests.factories import SYSTEM, make_key, make_member, make_tenant, make_user

ROOT = Path(__file__).resolve().parents[2]
ACTOR = Actor.system("audit-tests")
SSO_PROVIDER = Provider(name="idp", label="IdP", issuer="https://idp.test", client_id="c", client_secret="s")

# Public functions of the service modules that write nothing (reason for each).
READ_ONLY = {
    "tenants.tenant_view": "the audit record's shape of a tenant (pure)",
    "tenants.membership_view": "the audit record's shape of a membership (pure)",
    "tenants.invitation_view": "the audit record's shape of an invitation (pure)",
    "tenants.invitation_email": "normalises an address (pure)",
    "tenants.grant_view": "the audit record's shape of a per-object grant (pure)",
    "tenants.tenant_grants": "reads a tenant's per-object grants",
    "tenants.object_grant_view": "the audit record's shape of a grant on one object (pure)",
    "sso.roles_from_groups": "reads tenant roles out of a provider's group names (pure)",
    "tenants.invitation_for_token": "reads the invitation an invitation link's token belongs to",
    "quotas.limits_for": "reads the policies that apply",
    "audit.issue_record": "what an issue event keeps of a manifest (pure)",
    "audit.latest_issued_manifest": "reads the newest issue event",
    "fleet.validate_spec_sizes": "raises on a bad spec (pure)",
    "fleet.scaling_view": "the audit record's shape of a scaling policy (pure)",
    "models_registry.model_view": "the audit record's shape of a model (pure)",
    "models_registry.version_view": "the audit record's shape of a version (pure)",
    "usage.price_view": "the audit record's shape of a price (pure)",
    "usage.budget_view": "the audit record's shape of a budget state (pure)",
    "usage.current_price": "reads the price in force",
    "capacity.gpu_type_view": "the audit record's shape of a GPU type (pure)",
}

# Writes that legitimately append no audit event: observation and telemetry, not configuration.
NOT_AUDITED = {
    "apikeys.record_key_use": "last-used telemetry: an audit row per request would drown the trail",
    "usage.record_usage_batch": "usage telemetry, thousands of rows a minute from the gateway",
    "usage.mark_hours_stale": "rollup bookkeeping: derived data is recomputed, never configured",
    "usage.record_feedback": "a client's accepted/rejected signal on a completion: usage telemetry",
    "fleet.request_wake": "marks that traffic arrived for a deployment at zero; the wake it causes "
                          "(fleet.deployment.autoscale.up) is audited",
    "usage.set_budget_state:recheck": "the month-to-date figures of a recheck; entering or leaving "
                                      "over-budget is audited (usage.set_budget_state)",
    "rollouts.record_evaluation": "the latest gate figures, every few seconds (observation); the transitions "
                                  "they cause are audited with them",
}


def service_modules() -> list[ModuleType]:
    """Every `<app>/services.py` and every module of an `<app>/services/` package in the repository."""
    modules = []
    for app in sorted(p.parent for p in ROOT.glob("*/__init__.py")):
        if (app / "services.py").is_file() or (app / "services" / "__init__.py").is_file():
            package = importlib.import_module(f"{app.name}.services")
            modules.append(package)
            for info in pkgutil.walk_packages(getattr(package, "__path__", []), f"{package.__name__}."):
                modules.append(importlib.import_module(info.name))
    return modules


def service_name(module: ModuleType, function_name: str) -> str:
    """`fleet.create_deployment` for fleet/services.py, `x.sub.fn` for x/services/sub.py."""
    app, _, rest = module.__name__.partition(".services")
    return ".".join(filter(None, (app, rest.lstrip("."), function_name)))


def public_functions() -> set[str]:
    return {service_name(module, name) for module in service_modules()
            for name, fn in inspect.getmembers(module, inspect.isfunction)
            if fn.__module__ == module.__name__ and not name.startswith("_")}


def build_world(model_root: Path) -> SimpleNamespace:
    """Tenant A with an owner, a developer holding two live keys and one revoked, a key-level quota, a
    pending invitation (and the user it is for), a model with a draft, a published and a deprecated
    version, and a shared deployment of the published one with a ready instance."""
    from fleet.models import Deployment, Instance, ScalingPolicy
    from models_registry.models import Model, ModelVersion
    from tenants.models import Invitation

    tenant = make_tenant("tenant-a")
    owner = make_member(tenant, "owner", make_user("alice"))
    dev = make_member(tenant, "developer", make_user("dana"))
    keys = [make_key(tenant, dev, role="developer", scopes=("inference",)) for _ in range(3)]
    apikeys.revoke_api_key(keys[2].api_key, actor=SYSTEM)
    policy = quotas.create_quota_policy(tenant=tenant, api_key=keys[0].api_key, actor=SYSTEM, requests_per_minute=5)
    invitation = Invitation.objects.create(tenant=tenant, email="guest@example.test", role="viewer",
                                           expires_at=timezone.now() + timedelta(days=1))
    grant = tenants.grant_permission(tenant=tenant, user=owner, perm="export_audit", actor=SYSTEM)
    scim_user = sso.scim_create_user(provider=SSO_PROVIDER, user_name="scim-user", email="s@idp.test", actor=SYSTEM)
    make_key(tenant, make_member(tenant, "viewer", scim_user), role="viewer", name="scim key")
    scim_group = sso.scim_save_group(provider=SSO_PROVIDER, display_name="unrelated", member_ids=[], actor=SYSTEM)
    link_invitation = Invitation.objects.create(tenant=tenant, email="no-account-yet@example.test", role="developer",
                                                expires_at=timezone.now() + timedelta(days=1))
    model = Model.objects.create(name="coder")
    versions = {status: ModelVersion.objects.create(model=model, version=status, artifact_uri="coder", status=status,
                                                    max_context=1024)
                for status in ("draft", "published", "deprecated")}
    deployment = Deployment.objects.create(tenant=None, name="coder", model_version=versions["published"],
                                           runtime_backend="simulator", min_replicas=1, max_replicas=2)
    instance = Instance.objects.create(deployment=deployment, state="ready", endpoint_url="http://127.0.0.1:9/",
                                       port=9, ready_at=timezone.now())
    ScalingPolicy.objects.create(deployment=deployment, enabled=False)
    # a grant on one deployment, in a tenant of its own (tenant-a is deleted by a case: it holds no deployment)
    grant_tenant, gina = make_tenant("tenant-g"), make_user("gina")
    make_member(grant_tenant, "viewer", gina)
    tenant_deployment = Deployment.objects.create(tenant=grant_tenant, name="coder-g",
                                                  model_version=versions["published"], runtime_backend="simulator")
    object_grant = tenants.grant_object_permission(obj=tenant_deployment, user=gina, perm="change_deployment",
                                                   actor=SYSTEM)
    rollouts_by_state = _rollouts(model, versions)
    for name in ("coder", "tiny-coder"):
        (model_root / name).mkdir()
    return SimpleNamespace(tenant=tenant, owner=owner, dev=dev, keys=keys, policy=policy, invitation=invitation,
                           link_invitation=link_invitation, grant=grant, scim_user=scim_user,
                           scim_group=scim_group, staff=make_user("root-ops", staff=True),
                           guest=make_user("guest"), dev_membership=dev.memberships.get(tenant=tenant), model=model,
                           versions=versions, deployment=deployment, instance=instance, model_root=model_root,
                           tenant_deployment=tenant_deployment, object_grant=object_grant, gina=gina,
                           rollouts=rollouts_by_state)


def _gpu_type(name: str):
    from capacity.models import GpuType

    return GpuType.objects.get(name=name)  # seeded by capacity migration 0001


def _usage_event(w, request_id="req-audit-1") -> dict:
    return {"request_id": request_id, "occurred_at": timezone.now(), "tenant": w.tenant, "status_code": 200,
            "outcome": "ok", "prompt_tokens": 100, "completion_tokens": 20, "latency_ms": 400.0, "ttft_ms": 80.0}


def _over_budget(w, over=True):
    return usage.set_budget_state(w.tenant, over_budget=over, reason="monthly tokens" if over else "", tokens=5,
                                  cost_usd=Decimal("1.5"), actor=ACTOR)


def _issue_manifest(w):
    builder = ManifestBuilder(fmt="jsonl", filters={})
    return audit.issue_manifest(builder, actor=ACTOR)


def _rollouts(model, versions: dict) -> dict:
    """A rollout in each state that services act on, each of its own deployment, to a second published version."""
    from fleet.models import Deployment
    from models_registry.models import ModelVersion
    from rollouts.models import Rollout

    target = ModelVersion.objects.create(model=model, version="published-2", artifact_uri="coder", status="published",
                                         max_context=1024)
    found = {"target": target}
    for state in ("pending", "ramping", "paused", "promoted"):
        deployment = Deployment.objects.create(name=f"coder-{state}", runtime_backend="simulator",
                                               model_version=target if state == "promoted" else versions["published"])
        found[state] = Rollout.objects.create(
            deployment=deployment, from_version=versions["published"], to_version=target, state=state,
            stages=[{"weight": 0.1, "bake_seconds": 0}, {"weight": 1.0, "bake_seconds": 0}],
            stage_started_at=None if state == "pending" else timezone.now(), weight=0.0 if state == "pending" else 0.1,
            promoted_at=timezone.now() if state == "promoted" else None)
    return found


# name -> (call with the world, the actions it must append in order). A name with ":" is a second case of
# the service before the colon.
def _scaled(w):
    from fleet.autoscaling.policy import Decision

    return fleet.apply_scaling_decision(w.deployment, Decision("up", 1, 2, "queue", {"waiting": 20}, "test"),
                                        actor=ACTOR)


CASES = {
    "tenants.create_tenant": (lambda w: tenants.create_tenant(slug="new-one", name="New", actor=ACTOR),
                              ["tenant.create", "quota.create"]),
    "tenants.create_tenant:owner": (lambda w: tenants.create_tenant(slug="new-one", name="New", admin_email="o@n.test",
                                                                    actor=ACTOR),
                                    ["tenant.create", "quota.create", "member.invite"]),
    "tenants.join_with_password": (lambda w: tenants.join_with_password(
        w.link_invitation, username="newcomer", password="a long new passphrase 42", actor=ACTOR),
        ["user.create", "member.invitation_accept", "member.add"]),
    "sso.sign_in_with_oidc": (lambda w: sso.sign_in_with_oidc(
        provider=SSO_PROVIDER, actor=ACTOR, claims={"iss": "https://idp.test", "sub": "u-1", "email": "u@idp.test",
                                                    "groups": [f"switchyard:{w.tenant.slug}:viewer"]}),
        ["sso.identity_create", "member.add", "sso.mapping_apply"]),
    "tenants.grant_permission": (lambda w: tenants.grant_permission(tenant=w.tenant, user=w.dev, perm="view_audit",
                                                                    actor=ACTOR), ["member.grant"]),
    "tenants.revoke_permission": (lambda w: tenants.revoke_permission(w.grant, actor=ACTOR), ["member.grant_revoke"]),
    "tenants.grant_object_permission": (lambda w: tenants.grant_object_permission(
        obj=w.tenant_deployment, user=w.gina, perm="view_deployment", actor=ACTOR), ["member.object_grant"]),
    "tenants.revoke_object_permission": (lambda w: tenants.revoke_object_permission(w.object_grant, actor=ACTOR),
                                         ["member.object_grant_revoke"]),
    "sso.scim_create_user": (lambda w: sso.scim_create_user(provider=SSO_PROVIDER, user_name="bjensen",
                                                           email="b@idp.test", actor=ACTOR), ["scim.user_create"]),
    "sso.scim_update_user": (lambda w: sso.scim_update_user(w.scim_user, provider=SSO_PROVIDER, email="new@idp.test",
                                                           actor=ACTOR), ["scim.user_update"]),
    "sso.scim_update_user:deactivate": (lambda w: sso.scim_update_user(w.scim_user, provider=SSO_PROVIDER,
                                                                      active=False, actor=ACTOR),
                                        ["scim.user_update", "api_key.revoke", "scim.user_deactivate"]),
    "sso.scim_save_group": (lambda w: sso.scim_save_group(
        provider=SSO_PROVIDER, display_name=f"switchyard:{w.tenant.slug}:developer", member_ids=[w.scim_user.pk],
        actor=ACTOR), ["scim.group_save", "member.update"]),
    "sso.scim_delete_group": (lambda w: sso.scim_delete_group(w.scim_group, provider=SSO_PROVIDER, actor=ACTOR),
                              ["scim.group_delete"]),
    "tenants.update_tenant": (lambda w: tenants.update_tenant(w.tenant, name="Renamed", actor=ACTOR),
                              ["tenant.update"]),
    "tenants.set_tenant_status": (lambda w: tenants.set_tenant_status(w.tenant, "suspended", actor=ACTOR),
                                  ["tenant.suspend"]),
    "tenants.delete_tenant": (lambda w: tenants.delete_tenant(w.tenant, actor=ACTOR), ["tenant.delete"]),
    "tenants.add_member": (lambda w: tenants.add_member(tenant=w.tenant, email="new@a.test", role="viewer",
                                                        actor=ACTOR), ["member.add"]),
    "tenants.change_member_role": (lambda w: tenants.change_member_role(w.dev_membership, "viewer", actor=ACTOR),
                                   ["member.update"]),
    "tenants.invite_member": (lambda w: tenants.invite_member(tenant=w.tenant, email="new@a.test", role="viewer",
                                                              actor=ACTOR), ["member.invite"]),
    "tenants.accept_invitation": (lambda w: tenants.accept_invitation(w.invitation, user=w.guest, actor=ACTOR),
                                  ["member.invitation_accept", "member.add"]),
    "tenants.decline_invitation": (lambda w: tenants.decline_invitation(w.invitation, user=w.guest, actor=ACTOR),
                                   ["member.invitation_decline"]),
    "tenants.revoke_invitation": (lambda w: tenants.revoke_invitation(w.invitation, actor=ACTOR),
                                  ["member.invitation_revoke"]),
    # two live keys revoked (the already-revoked third one is not audited again), then the removal itself
    "tenants.remove_member": (lambda w: tenants.remove_member(w.dev_membership, actor=ACTOR),
                              ["api_key.revoke", "api_key.revoke", "member.remove"]),
    "tenants.set_platform_admin_password": (lambda w: tenants.set_platform_admin_password(
        username="root", actor=ACTOR), ["platform_admin.create"]),
    "tenants.set_platform_admin_password:reset": (lambda w: tenants.set_platform_admin_password(
        username=w.owner.username, actor=ACTOR), ["platform_admin.password_reset"]),
    "apikeys.create_api_key": (lambda w: apikeys.create_api_key(tenant=w.tenant, name="k", scopes=["inference"],
                                                                actor=ACTOR), ["api_key.create"]),
    "apikeys.create_platform_key": (lambda w: apikeys.create_platform_key(
        name="terraform", user=w.staff, actor=ACTOR), ["api_key.create"]),
    "apikeys.revoke_api_key": (lambda w: apikeys.revoke_api_key(w.keys[0].api_key, actor=ACTOR), ["api_key.revoke"]),
    "apikeys.rotate_api_key": (lambda w: apikeys.rotate_api_key(w.keys[0].api_key, grace_seconds=60, actor=ACTOR),
                               ["api_key.rotate"]),
    "apikeys.revoke_user_keys": (lambda w: apikeys.revoke_user_keys(tenant=w.tenant, user=w.dev, actor=ACTOR),
                                 ["api_key.revoke", "api_key.revoke"]),
    "apikeys.record_key_use": (lambda w: apikeys.record_key_use(w.keys[0].api_key), []),
    "quotas.create_quota_policy": (lambda w: quotas.create_quota_policy(
        tenant=w.tenant, user=w.dev, requests_per_minute=10, actor=ACTOR), ["quota.create"]),
    "quotas.update_quota_policy": (lambda w: quotas.update_quota_policy(w.policy, tokens_per_minute=99, actor=ACTOR),
                                   ["quota.update"]),
    "quotas.delete_quota_policy": (lambda w: quotas.delete_quota_policy(w.policy, actor=ACTOR), ["quota.delete"]),
    "quotas.set_tenant_budget": (lambda w: quotas.set_tenant_budget(
        w.tenant, monthly_token_budget=1_000_000, monthly_budget_usd=250, actor=ACTOR), ["quota.update"]),
    "audit.record_event": (lambda w: audit.record_event(actor=ACTOR, action="test.direct"), ["test.direct"]),
    "audit.issue_manifest": (_issue_manifest, ["audit.manifest_issue"]),
    "fleet.create_deployment": (lambda w: fleet.create_deployment(
        tenant=w.tenant, name="second", model_version=w.versions["published"], runtime_backend="simulator",
        actor=ACTOR), ["fleet.deployment.create"]),
    "fleet.scale_deployment": (lambda w: fleet.scale_deployment(w.deployment, max_replicas=3, actor=ACTOR),
                               ["fleet.deployment.scale"]),
    "fleet.delete_deployment": (lambda w: fleet.delete_deployment(w.deployment, actor=ACTOR),
                                ["fleet.deployment.delete"]),
    "fleet.drain_instance": (lambda w: fleet.drain_instance(w.instance, actor=ACTOR), ["fleet.instance.draining"]),
    "fleet.restart_instance": (lambda w: fleet.restart_instance(w.instance, actor=ACTOR), ["fleet.instance.draining"]),
    "fleet.set_scaling_policy": (lambda w: fleet.set_scaling_policy(w.deployment, actor=ACTOR, max_step=3),
                                 ["fleet.deployment.scaling_policy"]),
    "fleet.apply_scaling_decision": (lambda w: _scaled(w), ["fleet.deployment.autoscale.up"]),
    "fleet.request_wake": (lambda w: fleet.request_wake(w.deployment.pk), []),
    "fleet.set_routing_policy": (lambda w: fleet.set_routing_policy(w.deployment, routing_policy="round_robin",
                                                                    actor=ACTOR), ["fleet.deployment.routing_policy"]),
    "models_registry.register_model": (lambda w: registry.register_model(name="new-model", actor=ACTOR),
                                       ["model.register"]),
    "models_registry.update_model": (lambda w: registry.update_model(w.model, description="Writes code.", actor=ACTOR),
                                     ["model.update"]),
    "models_registry.create_version": (lambda w: registry.create_version(model=w.model, version="v9",
                                                                         artifact_uri="coder", actor=ACTOR),
                                       ["model_version.create"]),
    "models_registry.update_draft_version": (lambda w: registry.update_draft_version(
        w.versions["draft"], dtype="float16", actor=ACTOR), ["model_version.update"]),
    "models_registry.publish_version": (lambda w: registry.publish_version(w.versions["draft"], actor=ACTOR),
                                        ["model_version.publish"]),
    "models_registry.deprecate_version": (lambda w: registry.deprecate_version(w.versions["published"], actor=ACTOR),
                                          ["model_version.deprecate"]),
    "models_registry.retire_version": (lambda w: registry.retire_version(w.versions["deprecated"], actor=ACTOR),
                                       ["model_version.retire"]),
    "models_registry.ensure_tiny_coder": (lambda w: registry.ensure_tiny_coder(
        model_dir=w.model_root / "tiny-coder", actor=ACTOR), ["model.register", "model_version.create",
                                                              "model_version.publish"]),
    "usage.set_gpu_price": (lambda w: usage.set_gpu_price("h100", Decimal("2.5"), actor=ACTOR),
                            ["usage.gpu_price.set"]),
    "usage.set_budget_state": (_over_budget, ["tenant.over_budget"]),
    "usage.set_budget_state:recheck": (lambda w: _over_budget(w, over=False), []),
    "usage.record_usage_batch": (lambda w: usage.record_usage_batch([_usage_event(w)]), []),
    "usage.mark_hours_stale": (lambda w: usage.mark_hours_stale([timezone.now() - timedelta(days=30)]), []),
    "usage.record_feedback": (lambda w: usage.record_feedback("req-audit-1", True, tenant=w.tenant), []),
    "rollouts.start_rollout": (lambda w: rollouts.start_rollout(w.deployment, to_version=w.rollouts["target"],
                                                                actor=ACTOR), ["rollout.start"]),
    "rollouts.begin_ramping": (lambda w: rollouts.begin_ramping(w.rollouts["pending"], baseline={}, actor=ACTOR),
                               ["rollout.ramp"]),
    "rollouts.advance_rollout": (lambda w: rollouts.advance_rollout(w.rollouts["ramping"], figures={}, actor=ACTOR),
                                 ["rollout.advance"]),
    "rollouts.pause_rollout": (lambda w: rollouts.pause_rollout(w.rollouts["ramping"], actor=ACTOR),
                               ["rollout.pause"]),
    "rollouts.resume_rollout": (lambda w: rollouts.resume_rollout(w.rollouts["paused"], actor=ACTOR),
                                ["rollout.resume"]),
    "rollouts.promote_rollout": (lambda w: rollouts.promote_rollout(w.rollouts["ramping"], actor=ACTOR),
                                 ["rollout.promote"]),
    "rollouts.roll_back_rollout": (lambda w: rollouts.roll_back_rollout(w.rollouts["ramping"], actor=ACTOR),
                                   ["rollout.roll_back"]),
    "rollouts.roll_back_rollout:promoted": (lambda w: rollouts.roll_back_rollout(w.rollouts["promoted"],
                                                                                 actor=ACTOR), ["rollout.start"]),
    "rollouts.retire_previous_version": (lambda w: rollouts.retire_previous_version(w.rollouts["promoted"],
                                                                                    actor=ACTOR),
                                         ["rollout.retire_previous"]),
    "rollouts.record_evaluation": (lambda w: rollouts.record_evaluation(w.rollouts["ramping"], {"verdict": "wait"}),
                                   []),
    "capacity.create_gpu_type": (lambda w: capacity.create_gpu_type(name="B200", memory_mib=183359, actor=ACTOR),
                                 ["capacity.gpu_type.create"]),
    "capacity.update_gpu_type": (lambda w: capacity.update_gpu_type(_gpu_type("L4"), memory_mib=23000, actor=ACTOR),
                                 ["capacity.gpu_type.update"]),
    "capacity.delete_gpu_type": (lambda w: capacity.delete_gpu_type(_gpu_type("H200"), actor=ACTOR),
                                 ["capacity.gpu_type.delete"]),
}
AUDITED = sorted(name for name, (_, expected) in CASES.items() if expected)
