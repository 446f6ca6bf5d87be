"""The world the role matrices act on: tenant A with one target per write, tenant B and a shared pool
beside it (so a scoped read can be told from an unscoped one), and one actor per kind of caller.

Every write has its own target, so running a whole column in order never makes one action's answer
depend on another's (the tenant itself is deleted last).
"""
from datetime import timedelta
from types import SimpleNamespace

from django.utils import timezone

from apikeys.scopes import Scope
from audit.actor import Actor
from fleet.models import Deployment, Instance
from fleet.states import InstanceState
from models_registry import services as registry
from quotas.models import QuotaPolicy
from quotas.services import create_quota_policy
from tenants.models import Invitation, Membership
from tenants.roles import Perm, Role
from tenants.services import grant_object_permission, grant_permission
from tests.factories import make_key, make_member, make_user
from tests.models_registry.registry_helpers import HF_URI
from usage.models import BudgetState

SYSTEM = Actor.system("tests")
ROLES = [Role.OWNER, Role.ADMIN, Role.DEVELOPER, Role.AUDITOR, Role.VIEWER]
LOG_TAIL = "INFO engine started\nINFO serving tiny-coder"


def _inference_key(tenant, user, name):
    return make_key(tenant, user, role=Role.DEVELOPER, scopes=(Scope.INFERENCE,), name=name).api_key


def _versions():
    model = registry.register_model(name="matrix-coder", family="other", actor=SYSTEM)
    made = {label: registry.create_version(model=model, version=label, artifact_uri=HF_URI, actor=SYSTEM)
            for label in ("main", "next", "draft", "to-publish", "to-deprecate", "to-retire")}
    for label in ("main", "next", "to-deprecate", "to-retire"):
        made[label] = registry.publish_version(made[label], actor=SYSTEM)
    made["to-retire"] = registry.deprecate_version(made["to-retire"], actor=SYSTEM)
    return SimpleNamespace(model=model, **{k.replace("-", "_"): v for k, v in made.items()})


def _deployment(tenant, version, name, instances=1):
    deployment = Deployment.objects.create(tenant=tenant, name=name, model_version=version, runtime_backend="simulator",
                                           min_replicas=instances, max_replicas=max(instances, 1))
    for n in range(instances):
        Instance.objects.create(deployment=deployment, state=InstanceState.READY, endpoint_url=f"http://127.0.0.1:9{n}",
                                port=9000 + n, runtime_handle={"pid": 4000 + n}, ready_at=timezone.now(),
                                log_tail=LOG_TAIL, last_health_ok=True, metrics={"num_requests_waiting": 1})
    return deployment


def make_rollout(deployment, versions):
    """A canary of `deployment` to the next version, at its first stage."""
    from rollouts.models import Rollout, RolloutState

    return Rollout.objects.create(deployment=deployment, from_version=versions.main, to_version=versions.next,
                                  stages=[{"weight": 0.1, "bake_seconds": 900}, {"weight": 1.0, "bake_seconds": 0}],
                                  state=RolloutState.RAMPING, weight=0.1, stage_started_at=timezone.now())


def build_world(alice, bob):
    """Tenant A (alice owns it) with targets for every route, tenant B, a shared pool and the registry."""
    a, b = alice.tenant, bob.tenant
    make_member(a, Role.OWNER, make_user("owner2"))
    target_dev = make_member(a, Role.DEVELOPER, make_user("target-dev"))
    target_viewer = make_member(a, Role.VIEWER, make_user("target-viewer"))
    key_holder = make_member(a, Role.DEVELOPER, make_user("key-holder"))
    platform_ops = make_user("platform-ops", staff=True)
    versions = _versions()
    dep = _deployment(a, versions.main, "coder-a", instances=2)
    from audit.models import AuditEvent

    world = SimpleNamespace(
        alice=alice, bob=bob, a=a, b=b, versions=versions,
        target_dev=Membership.objects.get(tenant=a, user=target_dev),
        target_viewer=Membership.objects.get(tenant=a, user=target_viewer),
        others_keys=[_inference_key(a, key_holder, "theirs 1"), _inference_key(a, key_holder, "theirs 2")],
        user_quota=create_quota_policy(tenant=a, user=target_viewer, requests_per_minute=9, actor=SYSTEM),
        tenant_quota=QuotaPolicy.objects.get(tenant=a, api_key=None, user=None),
        a_event=AuditEvent.objects.filter(tenant=a).values_list("seq", flat=True).first(),
        invitation=Invitation.objects.create(tenant=a, email="invited@example.test", role=Role.VIEWER,
                                             expires_at=timezone.now() + timedelta(days=3)),
        dep=dep, instances=list(dep.instances.order_by("pk")),
        doomed=_deployment(a, versions.main, "doomed-a"),
        dep_b=_deployment(b, versions.main, "coder-b"), shared=_deployment(None, versions.main, "shared-pool"),
        # another platform admin's platform keys: one to revoke, one to rotate, one to DELETE
        platform_keys=[make_key(None, platform_ops, name=f"platform {n}").api_key for n in range(3)],
        grant=grant_permission(tenant=a, user=target_dev, perm=Perm.VIEW_AUDIT, actor=SYSTEM),
        dep_grant=grant_object_permission(obj=dep, user=target_dev, perm="view_deployment", actor=SYSTEM),
        rollout=make_rollout(_deployment(a, versions.main, "canary-a"), versions),
    )
    for tenant in (a, b):
        BudgetState.objects.create(tenant=tenant, checked_at=timezone.now())
    return world


def actor(world, kind: str, *, staff=None):
    """The caller of one column: a member of A with that role (or platform staff), their admin-scoped key
    (capped at the role), three inference keys of their own and an invitation to tenant B to answer."""
    if kind == "platform":
        user = staff
    elif kind == Role.OWNER:
        user = world.alice.user
    else:
        user = make_member(world.a, kind, make_user(f"acting-{kind}"))
    role = Role.OWNER if kind == "platform" else kind
    raw = make_key(world.a, user, role=role, name=f"{kind} admin key").raw
    audit_raw = make_key(world.a, user, role=role, scopes=(Scope.AUDIT_READ,), name=f"{kind} audit key").raw
    Invitation.objects.create(tenant=world.b, email=user.email, role=Role.VIEWER,
                              expires_at=timezone.now() + timedelta(days=3))
    own = [_inference_key(world.a, user, f"mine {n}") for n in range(3)]
    return SimpleNamespace(user=user, raw=raw, audit_raw=audit_raw, own_keys=own,
                           invitation=Invitation.objects.get(tenant=world.b, email=user.email))


def nobody(world):
    """Signed in, no role anywhere (and one invitation to answer)."""
    user = make_user("nobody")
    Invitation.objects.create(tenant=world.b, email=user.email, role=Role.VIEWER,
                              expires_at=timezone.now() + timedelta(days=3))
    return SimpleNamespace(user=user, own_keys=[], invitation=Invitation.objects.get(email=user.email))

