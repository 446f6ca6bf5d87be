"""Fleet tasks: thin wrappers (ids in, small dicts out); the logic lives in reconcile, health and stopping."""
from celery import shared_task

from fleet import health, stopping
from fleet import reconcile as reconciling

DRAIN_POLL_SECONDS = 2
WARM_UP_TIME_LIMIT = 130  # past SWITCHYARD_FLEET_WARM_UP_TIMEOUT_SECONDS' largest value (120)


@shared_task(name="fleet.reconcile", time_limit=120, soft_time_limit=100, acks_late=True)
def reconcile(deployment_id: int) -> dict:
    """Converge one deployment on its desired state."""
    return reconciling.reconcile_deployment(deployment_id)


@shared_task(name="fleet.reconcile_all", time_limit=120, soft_time_limit=100)
def reconcile_all() -> dict:
    """Periodic backstop: sweep orphan engines, then reconcile every deployment."""
    ids = reconciling.reconcile_all()
    for deployment_id in ids:
        reconcile.delay(deployment_id)
    return {"deployments": len(ids)}


@shared_task(name="fleet.health_check", time_limit=60, soft_time_limit=50)
def health_check() -> dict:
    """Probe every running instance once."""
    return health.check_all()


@shared_task(name="fleet.replace_failed", time_limit=60, soft_time_limit=50, acks_late=True)
def replace_failed(instance_id: int) -> dict:
    """Clean up a failed instance, then let reconcile start its replacement after back-off."""
    cleaned = stopping.clean_up_failed(instance_id)
    from fleet.models import Instance

    deployment_id = Instance.objects.filter(pk=instance_id).values_list("deployment_id", flat=True).first()
    if deployment_id is not None:
        reconcile.delay(deployment_id)
    return {"instance": instance_id, "cleaned": cleaned}


@shared_task(name="fleet.drain", time_limit=60, soft_time_limit=50, acks_late=True)
def drain(instance_id: int) -> dict:
    """One drain step; polls again shortly (without holding a worker) until the instance stops."""
    done = stopping.drain_step(instance_id)
    if not done:
        drain.apply_async((instance_id,), countdown=DRAIN_POLL_SECONDS)
    return {"instance": instance_id, "done": done}


@shared_task(name="fleet.warm_up", time_limit=WARM_UP_TIME_LIMIT, soft_time_limit=WARM_UP_TIME_LIMIT - 5)
def warm_up(instance_id: int) -> dict:
    """One small request to an engine that just became ready, so a user's is never its first (fleet/warmup.py)."""
    from fleet import warmup

    return warmup.warm_up(instance_id)


@shared_task(name="fleet.autoscale", time_limit=30, soft_time_limit=25)
def autoscale() -> dict:
    """Sample every deployment's demand and apply its scaling policy."""
    from fleet.autoscaling import scaler

    return scaler.run_pass()


@shared_task(name="fleet.wake", time_limit=30, soft_time_limit=25)
def wake(deployment_id: int) -> dict:
    """The gateway got a request for a deployment asleep at zero: decide now rather than at the next pass."""
    from fleet.autoscaling import scaler
    from fleet.services import request_wake

    if not request_wake(deployment_id):
        return {"deployment": deployment_id, "asleep": False}
    return {"deployment": deployment_id, "changed": scaler.scale_one(deployment_id)}


@shared_task(name="fleet.autoscale_now", time_limit=30, soft_time_limit=25)
def autoscale_now(deployment_id: int) -> dict:
    """A gateway holds requests for this deployment at its surge level: sample and decide now, not at the next pass."""
    from fleet.autoscaling import scaler

    return {"deployment": deployment_id, "changed": scaler.scale_one(deployment_id)}
