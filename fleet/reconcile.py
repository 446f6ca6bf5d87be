"""Converge a deployment's instances on its desired state, through its runtime backend.

  1. plan — under the deployment row lock (`select_for_update`), so concurrent reconciles of one
     deployment queue behind each other and never plan the same instance twice: create `pending`
     rows up to the target, drain the extras; committed before anything is launched, so the orphan
     sweep can always tell a fresh engine from an orphan;
  2. launch — for every due `pending` instance: claim it (committed), start it with no lock held
     (the backend adopts an engine a crashed worker had already launched for it), then record it
     as `starting` — or stop what started if the instance was stopped or removed meanwhile
     (fleet/launching.py). One the host has no room for stays `pending` with the reason, and so
     do the rest of the deployment's.
Health checks move `starting` to `ready`; `fleet.drain` and `fleet.replace_failed` stop processes.
"""
import logging

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from audit.services import record_event
from fleet import backoff, launching, roles, versions
from fleet.models import Deployment, DeploymentStatus, Instance, InstanceRole
from fleet.runtime import backend_names, get_backend
from fleet.runtime.base import NoCapacity
from fleet.runtime.capacity import WAITING_FOR_CAPACITY
from fleet.states import LIVE_STATES, RUNNING_STATES, TERMINAL_STATES, InstanceState
from fleet.transitions import FLEET, fail_instance, record_pending_reason, set_role, track_warm_time
from fleet.views import deployment_view

logger = logging.getLogger(__name__)
S = InstanceState


def reconcile_deployment(deployment_id: int) -> dict:
    """One idempotent pass: plan, launch, then hand stopping work to the drain / replace tasks."""
    planned = _plan(deployment_id)
    if planned is None:
        return {"deployment": deployment_id, "exists": False}
    launched = _launch(deployment_id)
    _enqueue_follow_ups(deployment_id)
    _schedule_deferred_starts(deployment_id)
    removed = _remove_if_deleted(deployment_id)
    return {"deployment": deployment_id, "exists": not removed, **planned, "launched": launched}


def _lock(deployment_id: int) -> Deployment | None:
    return (Deployment.objects.select_for_update(of=("self",)).select_related("tenant", "model_version__model")
            .filter(pk=deployment_id).first())


def move_roles(deployment_id: int, *, sizes: bool = True) -> dict | None:
    """The role and size moves of one pass, now (no launches): a scale-up's promotions are routing changes only,
    and should not wait for the reconcile task behind the worker's other work. `sizes=False`: promotions and
    demotions only, in the caller's transaction (a rollout's weight change), creates and drains left to the pass."""
    return _plan(deployment_id, sizes=sizes)


@transaction.atomic
def _plan(deployment_id: int, *, sizes: bool = True) -> dict | None:
    deployment = _lock(deployment_id)
    if deployment is None:
        return None
    # Locked in pk order before any audit write: a transaction that holds the audit chain head and
    # then waits for an instance row deadlocks with a health check holding that row.
    live = list(deployment.instances.select_for_update(of=("self",)).filter(state__in=LIVE_STATES).order_by("pk"))
    targets = versions.targets_for(deployment)
    counts = {"created": 0, "drained": 0, "promoted": 0, "demoted": 0}
    for version_id in sorted(targets.keys() | {i.version_id for i in live}):
        target = targets.get(version_id, versions.VersionTarget(0, 0))
        group = [i for i in live if i.version_id == version_id]
        for name, count in _plan_version(deployment, version_id, group, target, sizes=sizes).items():
            counts[name] += count
    return counts


def _plan_version(deployment: Deployment, version_id: int, live: list[Instance], target, *,
                  sizes: bool = True) -> dict:
    """Roles, drains and new instances for one version's live instances (roles only without `sizes`)."""
    # A failed engine still being reaped keeps its slot: its replacement waits for the clean-up,
    # so the host never runs both, and then inherits the failed one's back-off.
    reaping = _failed(deployment, version_id).filter(released_at__isnull=True).count()
    plan = roles.plan_roles([roles.Live(i.pk, i.state, i.role) for i in live], target.serving, target.warm,
                            slots_held=reaping)
    by_pk = {i.pk: i for i in live}
    for pk in plan.promote:
        set_role(pk, InstanceRole.SERVING)
    for pk in plan.demote:
        set_role(pk, InstanceRole.WARM)
    if not sizes:
        return {"created": 0, "drained": 0, "promoted": len(plan.promote), "demoted": len(plan.demote)}
    for pk in plan.drain:
        _scale_down(by_pk[pk])
    created = [_create_instance(deployment, version_id, InstanceRole.SERVING) for _ in range(plan.create_serving)]
    created += [_create_instance(deployment, version_id, InstanceRole.WARM) for _ in range(plan.create_warm)]
    return {"created": len(created), "drained": len(plan.drain), "promoted": len(plan.promote),
            "demoted": len(plan.demote)}


def _failed(deployment: Deployment, version_id: int):
    """The deployment's failed instances of this version (rows without a version run the deployment's)."""
    same = Q(model_version_id=version_id)
    if version_id == deployment.model_version_id:
        same |= Q(model_version__isnull=True)
    return deployment.instances.filter(same, state=S.FAILED)


def _create_instance(deployment: Deployment, version_id: int, role: str) -> Instance:
    """A pending instance of a version; if it replaces a failed one it inherits the back-off chain."""
    failed = (_failed(deployment, version_id).filter(released_at__isnull=False, replacement__isnull=True)
              .order_by("failed_at").first())
    instance = Instance(deployment=deployment, role=role, model_version_id=version_id)
    if failed is not None and failed.failed_at is not None:  # a failed instance always has failed_at
        ready_for = failed.failed_at - failed.ready_at if failed.ready_at else None
        instance.replaces = failed
        instance.restart_count = backoff.next_restart_count(failed.restart_count, ready_for)
        instance.next_start_after = backoff.start_not_before(failed.failed_at, instance.restart_count)
    instance.save()
    if role == InstanceRole.WARM:
        track_warm_time(instance)
    record_event(actor=FLEET, action="fleet.instance.create", tenant=deployment.tenant, target=instance,
                 after={"deployment": deployment.pk, "role": role, "model_version": version_id,
                        "restart_count": instance.restart_count,
                        "next_start_after": instance.next_start_after})
    return instance


def _scale_down(instance: Instance) -> None:
    from fleet.services import drain_instance

    drain_instance(instance, actor=FLEET)


def _launch(deployment_id: int) -> int:
    """Start the due pending instances one by one; stop at the first the host has no room for."""
    due = _due_instances(deployment_id)
    launched = 0
    for position, instance_id in enumerate(due):
        try:
            launched += _launch_one(deployment_id, instance_id)
        except NoCapacity as exc:  # the rest need as much again: they wait with the same reason
            record_pending_reason(due[position:], str(exc))
            break
    return launched


@transaction.atomic
def _due_instances(deployment_id: int) -> list[int]:
    deployment = _lock(deployment_id)
    if deployment is None or deployment.status == DeploymentStatus.DELETING:
        return []
    now = timezone.now()
    due = []
    for instance in deployment.instances.filter(state=S.PENDING).order_by("pk"):
        if instance.next_start_after is None or instance.next_start_after <= now:
            due.append(instance.pk)
        else:
            record_pending_reason([instance.pk],
                                  f"restart back-off: starts after {instance.next_start_after:%H:%M:%S} UTC")
    return due


def _launch_one(deployment_id: int, instance_id: int) -> bool:
    """Claim (commit) → start (no lock held: a backend may wait on a slow API) → record what started."""
    claim = launching.claim(deployment_id, instance_id)
    if claim is None:
        return False
    instance, token = claim
    backend = get_backend(instance.deployment.runtime_backend)
    try:
        launched = backend.start(instance)
    except NoCapacity:
        launching.give_up(instance_id, token)
        raise
    except Exception as exc:  # a bad spec or missing engine must fail the instance, not the worker
        logger.exception("could not start %s", instance)
        fail_instance(instance.pk, f"start failed: {exc}")
        return False
    return launching.record(instance, token, launched, backend)


def _enqueue_follow_ups(deployment_id: int) -> None:
    """Re-send work a lost or crashed task never finished (both tasks are idempotent)."""
    from fleet.tasks import drain, replace_failed

    instances = Instance.objects.filter(deployment_id=deployment_id)
    for pk in instances.filter(state=S.DRAINING).values_list("pk", flat=True):
        drain.delay(pk)
    for pk in instances.filter(state=S.FAILED, released_at__isnull=True).values_list("pk", flat=True):
        replace_failed.delay(pk)


def _schedule_deferred_starts(deployment_id: int) -> None:
    """Come back when the earliest backed-off instance may start (the periodic pass is the backstop)."""
    from fleet.tasks import reconcile

    due = (Instance.objects.filter(deployment_id=deployment_id, state=S.PENDING, next_start_after__isnull=False)
           .order_by("next_start_after").values_list("next_start_after", flat=True).first())
    if due is not None and due > timezone.now():
        reconcile.apply_async((deployment_id,), countdown=(due - timezone.now()).total_seconds() + 0.5)


@transaction.atomic
def _remove_if_deleted(deployment_id: int) -> bool:
    """Delete a `deleting` deployment once none of its processes is left."""
    deployment = _lock(deployment_id)
    if deployment is None or deployment.status != DeploymentStatus.DELETING:
        return False
    unfinished = deployment.instances.exclude(state__in=TERMINAL_STATES).exists()
    unreleased = deployment.instances.filter(state__in=TERMINAL_STATES, released_at__isnull=True).exists()
    if unfinished or unreleased:
        return False
    record_event(actor=FLEET, action="fleet.deployment.remove", tenant=deployment.tenant, target=deployment,
                 before=deployment_view(deployment))
    deployment.delete()
    return True


def sweep_orphans() -> list[int]:
    """Stop engines that no instance accounts for (a worker died between launch and record, a row was removed).

    Each orphan is stopped by the backend that reported it: only that backend knows how to reach it.
    """
    reported = {name: set(get_backend(name).running()) for name in backend_names()}
    accounted = _accounted_instances(set().union(*reported.values()))
    stopped: set[int] = set()
    for name, running in reported.items():
        for instance_id in sorted(running - accounted - stopped):
            logger.warning("stopping orphan engine of instance %s (%s backend)", instance_id, name)
            get_backend(name).stop_orphan(instance_id, settings.SWITCHYARD_FLEET_STOP_GRACE_SECONDS)
            stopped.add(instance_id)
    return sorted(stopped)


def _accounted_instances(ids: set[int]) -> set[int]:
    # Pending rows are committed before their engine launches (see _plan), so a process whose row
    # is pending is being launched right now or will be adopted by the next launch — not an orphan.
    keep = set(RUNNING_STATES) | {S.PENDING}
    rows = Instance.objects.filter(pk__in=ids).values_list("pk", "state", "released_at")
    return {pk for pk, state, released in rows if state in keep or (state == S.FAILED and released is None)}


def wake_capacity_waiters() -> list[int]:
    """Reconcile every deployment with an instance waiting for host room: an engine just stopped."""
    from fleet.tasks import reconcile

    ids = sorted(set(Instance.objects.filter(state=S.PENDING, pending_reason__startswith=WAITING_FOR_CAPACITY)
                     .values_list("deployment_id", flat=True)))
    for deployment_id in ids:
        reconcile.delay(deployment_id)
    return ids


def reconcile_all() -> list[int]:
    """Sweep orphans, then return every deployment id for a per-deployment reconcile."""
    sweep_orphans()
    return list(Deployment.objects.values_list("pk", flat=True))
