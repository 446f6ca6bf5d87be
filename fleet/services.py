"""Deployment writes (desired state) from the API and console. Workers converge on them later.

Nothing here waits for an engine: each write commits, then enqueues a reconcile on commit.
"""
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.actor import Actor
from audit.services import record_event
from fleet import launching
from fleet.models import Deployment, DeploymentStatus, Instance, ScalingDecision, ScalingPolicy
from fleet.states import InstanceState
from fleet.transitions import transition_instance
from fleet.validation import validate_spec
from fleet.views import deployment_view

SPEC_FIELDS = ("min_replicas", "max_replicas", "warm_pool_size", "tensor_parallel_size", "pipeline_parallel_size",
               "gpu_type", "region", "simulator_params", "runtime_backend", "fallback_model_name",
               "routing_policy")


def _reconcile_on_commit(deployment_id: int) -> None:
    from fleet.tasks import reconcile

    transaction.on_commit(lambda: reconcile.delay(deployment_id))


@transaction.atomic
def create_deployment(*, tenant, name: str, model_version, actor: Actor, **spec) -> Deployment:
    """Declare a new deployment; a worker starts its instances."""
    _lock_tenant(tenant)
    deployment = Deployment(tenant=tenant, name=name, model_version=model_version,
                            **{k: v for k, v in spec.items() if k in SPEC_FIELDS})
    deployment.serving_replicas = deployment.min_replicas
    validate_spec(deployment)
    deployment.full_clean(validate_constraints=True)
    deployment.save()
    record_event(actor=actor, action="fleet.deployment.create", tenant=tenant, target=deployment,
                 after=deployment_view(deployment))
    _reconcile_on_commit(deployment.pk)
    return deployment


@transaction.atomic
def scale_deployment(deployment: Deployment, *, actor: Actor, **sizes) -> Deployment:
    """Change min/max replicas and the warm pool; a worker starts or drains instances to match."""
    _lock_tenant(deployment.tenant)
    deployment = _locked(deployment.pk)
    before = deployment_view(deployment)
    for name in ("min_replicas", "max_replicas", "warm_pool_size"):
        if sizes.get(name) is not None:
            setattr(deployment, name, sizes[name])
    # The autoscaler's size stays within the new bounds (without it, serving follows min).
    deployment.serving_replicas = max(deployment.min_replicas, min(deployment.serving_replicas,
                                                                   deployment.max_replicas))
    if not deployment.autoscaled:
        deployment.serving_replicas = deployment.min_replicas
    validate_spec_sizes(deployment)
    _check_windows_fit(deployment)
    deployment.save()
    record_event(actor=actor, action="fleet.deployment.scale", tenant=deployment.tenant, target=deployment,
                 before=before, after=deployment_view(deployment))
    _reconcile_on_commit(deployment.pk)
    return deployment


def _check_windows_fit(deployment: Deployment) -> None:
    """A max_replicas under a schedule window's min_serving is refused, as such a window is (`_checked_schedule`):
    the window would be capped without a word."""
    from django.core.exceptions import ValidationError

    scaling = getattr(deployment, "scaling", None)
    over = _window_above([w["min_serving"] for w in scaling.schedule] if scaling is not None else [],
                         deployment.max_replicas)
    if over is not None:
        number, min_serving = over
        raise ValidationError({"max_replicas": f"Window {number} of the scaling schedule asks min_serving "
                                               f"{min_serving}, above {deployment.max_replicas}: lower "
                                               f"or remove the window first."})


def _window_above(min_servings: list[int], max_replicas: int) -> tuple[int, int] | None:
    """(number from 1, min_serving) of the first schedule window asking more than max_replicas, or None."""
    return next(((number, asked) for number, asked in enumerate(min_servings, start=1) if asked > max_replicas), None)


def validate_spec_sizes(deployment: Deployment) -> None:
    """Re-check the spec, but let a deployment of a since-deprecated version still be scaled."""
    from django.core.exceptions import ValidationError

    try:
        validate_spec(deployment)
    except ValidationError as exc:
        errors = {k: v for k, v in exc.message_dict.items() if k != "model_version"}
        if errors:
            raise ValidationError(errors) from None


@transaction.atomic
def delete_deployment(deployment: Deployment, *, actor: Actor) -> Deployment:
    """Mark a deployment for deletion: a worker drains every instance, then removes the rows."""
    deployment = _locked(deployment.pk)
    if deployment.status != DeploymentStatus.DELETING:
        before = deployment_view(deployment)
        deployment.status = DeploymentStatus.DELETING
        deployment.save(update_fields=["status", "updated_at"])
        record_event(actor=actor, action="fleet.deployment.delete", tenant=deployment.tenant, target=deployment,
                     before=before, after=deployment_view(deployment))
    _reconcile_on_commit(deployment.pk)
    return deployment


@transaction.atomic
def drain_instance(instance: Instance, *, actor: Actor, deadline_seconds: float | None = None) -> Instance:
    """Take an instance out of routing and stop it once idle (or at the deadline); reconcile replaces it."""
    from fleet.tasks import drain

    if deadline_seconds is None:
        deadline_seconds = settings.SWITCHYARD_FLEET_DRAIN_DEADLINE_SECONDS
    # Decide on the locked row, not the caller's copy: a worker may have launched it meanwhile, and a
    # launched engine marked stopped would run on with no row accounting for it.
    instance = Instance.objects.select_for_update(of=("self",)).get(pk=instance.pk)
    if instance.state == InstanceState.PENDING and not launching.in_progress(instance):
        instance = transition_instance(instance.pk, InstanceState.STOPPED, actor=actor, released_at=timezone.now())
    else:  # a pending instance whose engine is being started drains too: stopped only once that start is done
        deadline = timezone.now() + timedelta(seconds=deadline_seconds)
        instance = transition_instance(instance.pk, InstanceState.DRAINING, actor=actor, drain_deadline=deadline)
        transaction.on_commit(lambda: drain.delay(instance.pk))
    _reconcile_on_commit(instance.deployment_id)
    return instance


def restart_instance(instance: Instance, *, actor: Actor) -> Instance:
    """Stop an instance without waiting for its requests; reconcile starts a fresh one."""
    return drain_instance(instance, actor=actor, deadline_seconds=0)


def _lock_tenant(tenant) -> None:
    """Creates and scales of one tenant queue here, so two at once cannot both fit under its quota."""
    if tenant is not None:
        from tenants.models import Tenant

        Tenant.objects.select_for_update().filter(pk=tenant.pk).first()


def _locked(pk: int) -> Deployment:
    return (Deployment.objects.select_for_update(of=("self",)).select_related("tenant", "model_version__model")
            .get(pk=pk))


SCALING_FIELDS = ("enabled", "queue_per_instance", "kv_cache_usage", "ttft_p95_slo_ms", "up_window_seconds",
                  "low_water_per_instance", "idle_window_seconds", "zero_after_idle_seconds", "cooldown_up_seconds",
                  "cooldown_down_seconds", "max_step", "wake_timeout_seconds", "schedule", "schedule_lead_seconds")
AUTOSCALER = Actor.system("autoscaler")


@transaction.atomic
def set_scaling_policy(deployment: Deployment, *, actor: Actor, **fields) -> ScalingPolicy:
    """Create or change a deployment's scaling policy; turning it on starts from the current serving size."""
    deployment = _locked(deployment.pk)
    scaling, created = ScalingPolicy.objects.select_for_update().get_or_create(deployment=deployment)
    before = {} if created else scaling_view(scaling)
    for name in SCALING_FIELDS:
        if name in fields and (fields[name] is not None or name == "ttft_p95_slo_ms"):  # None clears the SLO
            setattr(scaling, name, fields[name])
    scaling.schedule = _checked_schedule(scaling.schedule, deployment)
    scaling.full_clean(exclude=["deployment"])
    scaling.save()
    deployment.serving_replicas = deployment.serving_target if scaling.enabled else deployment.min_replicas
    deployment.save(update_fields=["serving_replicas", "updated_at"])
    record_event(actor=actor, action="fleet.deployment.scaling_policy", tenant=deployment.tenant, target=deployment,
                 before=before, after=scaling_view(scaling))
    _reconcile_on_commit(deployment.pk)
    return scaling


def _checked_schedule(raw, deployment: Deployment) -> list[dict]:
    """The schedule in its stored form, or a ValidationError on `schedule` saying what is wrong."""
    from django.core.exceptions import ValidationError

    from fleet.autoscaling import schedule

    try:
        windows = schedule.parse(raw)
    except ValueError as exc:
        raise ValidationError({"schedule": str(exc)}) from None
    over = _window_above([window.min_serving for window in windows], deployment.max_replicas)
    if over is not None:
        number, min_serving = over
        raise ValidationError({"schedule": f"Window {number}: min_serving {min_serving} is above the "
                                           f"deployment's max_replicas ({deployment.max_replicas})."})
    return [window.as_dict() for window in windows]


@transaction.atomic
def set_routing_policy(deployment: Deployment, *, actor: Actor, routing_policy: str) -> Deployment:
    """Choose how the gateway picks this deployment's engines; every gateway applies it on commit."""
    deployment = _locked(deployment.pk)
    before = deployment_view(deployment)
    deployment.routing_policy = routing_policy
    deployment.full_clean(validate_constraints=False)
    deployment.save(update_fields=["routing_policy", "updated_at"])
    record_event(actor=actor, action="fleet.deployment.routing_policy", tenant=deployment.tenant, target=deployment,
                 before=before, after=deployment_view(deployment))
    return deployment


@transaction.atomic
def apply_scaling_decision(deployment: Deployment, decision, *, actor: Actor = AUTOSCALER) -> Deployment:
    """Move the serving size as the autoscaler decided: stored, audited with its figures, reconciled on commit."""
    deployment = _locked(deployment.pk)
    scaling = ScalingPolicy.objects.select_for_update().get(deployment=deployment)
    now = timezone.now()
    before = deployment.serving_replicas
    deployment.serving_replicas = decision.to_serving
    deployment.save(update_fields=["serving_replicas", "updated_at"])
    if decision.action == "up":
        scaling.last_scale_up_at = now
    else:
        scaling.last_scale_down_at = now
    if decision.rule == "wake" or decision.to_serving > 0:
        scaling.wake_requested_at = None
    scaling.save(update_fields=["last_scale_up_at", "last_scale_down_at", "wake_requested_at", "updated_at"])
    ScalingDecision.objects.create(deployment=deployment, decided_at=now, rule=decision.rule, action=decision.action,
                                   from_serving=decision.from_serving, to_serving=decision.to_serving,
                                   signals=decision.signals, reason=decision.reason[:300])
    record_event(actor=actor, action=f"fleet.deployment.autoscale.{decision.action}", tenant=deployment.tenant,
                 target=deployment, before={"serving_replicas": before},
                 after={"serving_replicas": decision.to_serving, "rule": decision.rule, "reason": decision.reason,
                        "signals": decision.signals})
    _reconcile_on_commit(deployment.pk)
    return deployment


def request_wake(deployment_id: int) -> bool:
    """A request arrived for a deployment asleep at zero: mark it (observation, not audited); True if it sleeps."""
    updated = ScalingPolicy.objects.filter(deployment_id=deployment_id, enabled=True, wake_requested_at__isnull=True,
                                           deployment__serving_replicas=0).update(wake_requested_at=timezone.now())
    return bool(updated) or ScalingPolicy.objects.filter(deployment_id=deployment_id,
                                                         wake_requested_at__isnull=False).exists()


def scaling_view(scaling: ScalingPolicy) -> dict:
    return {name: getattr(scaling, name) for name in SCALING_FIELDS}
