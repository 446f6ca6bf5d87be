"""Stopping engines: graceful drains and the clean-up of failed instances."""
from django.conf import settings
from django.utils import timezone

from fleet import launching
from fleet.health import new_client, probe
from fleet.models import Instance
from fleet.reconcile import wake_capacity_waiters
from fleet.runtime import get_backend
from fleet.states import InstanceState
from fleet.transitions import release_instance, try_transition

S = InstanceState


def drain_step(instance_id: int) -> bool:
    """Stop a draining instance once it runs no request or its deadline passed; True when finished."""
    instance = Instance.objects.select_related("deployment").filter(pk=instance_id).first()
    if instance is None or instance.state != S.DRAINING:
        return True
    if launching.in_progress(instance):
        return False  # a worker is starting its engine right now: stop it once that start is recorded
    past_deadline = instance.drain_deadline is None or timezone.now() >= instance.drain_deadline
    if not past_deadline and _requests_running(instance) > 0:
        return False
    backend = get_backend(instance.deployment.runtime_backend)
    if not backend.stop(instance, settings.SWITCHYARD_FLEET_STOP_GRACE_SECONDS):
        return False  # still there (a host under memory pressure is slow to free it): not stopped yet
    try_transition(instance.pk, S.STOPPED, released_at=timezone.now(), log_tail=backend.log_tail(instance, 20))
    wake_capacity_waiters()
    return True


def _requests_running(instance: Instance) -> float:
    """Requests the engine is still serving; an engine that cannot answer serves none worth waiting for."""
    if not instance.endpoint_url or not get_backend(instance.deployment.runtime_backend).is_alive(instance):
        return 0
    with new_client() as client:
        result = probe(instance.endpoint_url, client)
    if not result.ok or not result.metrics:
        return 0
    return result.metrics["num_requests_running"] + result.metrics["num_requests_waiting"]


def clean_up_failed(instance_id: int) -> bool:
    """Kill whatever is left of a failed instance's engine and keep its log tail; True if it did."""
    instance = Instance.objects.select_related("deployment").filter(pk=instance_id).first()
    if instance is None or instance.state != S.FAILED or instance.released_at is not None:
        return False
    backend = get_backend(instance.deployment.runtime_backend)
    # Released only once the process is gone: the slot it keeps stops a replacement from running beside it.
    if not backend.stop(instance, min(settings.SWITCHYARD_FLEET_STOP_GRACE_SECONDS, 5)):
        return False
    released = release_instance(instance.pk, log_tail=backend.log_tail(instance)) is not None
    wake_capacity_waiters()
    return released
