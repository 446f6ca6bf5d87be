"""Launching an instance without holding a lock while its engine starts: claim → start → record.

A backend's `start` may take seconds (a process spawn, a call to the Kubernetes API), so no
row lock is held across it. Instead the pending row is *claimed* in a short committed
transaction; a second worker skips a fresh claim. A claim older than CLAIM_TTL belongs to a
worker that died: it is taken over, and the backend adopts the engine that worker started.
After `start` the row is locked again: still pending under our claim → `starting`; drained
meanwhile (a scale-down, a delete) → where the engine runs is recorded and the drain, which waits
for the claim to end, stops it — so a `stopped` row still promises its engine is gone; claimed
by another worker since → left alone (that worker adopted the same engine and records it).
"""
import logging
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from fleet.models import Deployment, DeploymentStatus, Instance
from fleet.states import InstanceState
from fleet.transitions import try_transition

logger = logging.getLogger(__name__)
S = InstanceState
CLAIM_TTL = timedelta(seconds=150)  # longer than the reconcile task's hard time limit (120 s)


@transaction.atomic
def claim(deployment_id: int, instance_id: int) -> tuple[Instance, str] | None:
    """Mark a due pending instance as being launched by us; None if it is not ours to launch."""
    deployment = Deployment.objects.select_for_update(of=("self",)).filter(pk=deployment_id).first()
    if deployment is None or deployment.status == DeploymentStatus.DELETING:
        return None
    stale = timezone.now() - CLAIM_TTL
    instance = (Instance.objects.select_for_update(of=("self",))
                .select_related("deployment__model_version__model", "deployment__tenant", "model_version__model")
                .filter(Q(launch_claimed_at__isnull=True) | Q(launch_claimed_at__lt=stale),
                        pk=instance_id, deployment_id=deployment_id, state=S.PENDING).first())
    if instance is None:
        return None
    token = secrets.token_hex(16)
    Instance.objects.filter(pk=instance_id).update(launch_claim=token, launch_claimed_at=timezone.now())
    return instance, token


def in_progress(instance: Instance) -> bool:
    """Whether a worker is starting this instance's engine now (its claim is fresh)."""
    return bool(instance.launch_claim) and instance.launch_claimed_at is not None and (
        instance.launch_claimed_at >= timezone.now() - CLAIM_TTL)


def give_up(instance_id: int, token: str) -> None:
    """Release our claim (nothing started: no room); the instance waits for the next pass."""
    Instance.objects.filter(pk=instance_id, launch_claim=token).update(launch_claim="", launch_claimed_at=None)


def record(instance: Instance, token: str, launched, backend) -> bool:
    """Record a started engine on its row, or stop it when the row no longer wants one."""
    where = {"endpoint_url": launched.endpoint_url, "port": launched.port, "runtime_handle": launched.handle}
    with transaction.atomic():
        current = Instance.objects.select_for_update(of=("self",)).filter(pk=instance.pk).first()
        ours = current is not None and current.launch_claim == token
        if ours and current is not None and current.state == S.PENDING:
            return try_transition(instance.pk, S.STARTING, pending_reason="", launch_claim="",
                                  launch_claimed_at=None, **where) is not None
        if ours:  # drained while it started: the drain stops it once it knows where it runs
            Instance.objects.filter(pk=instance.pk).update(launch_claim="", launch_claimed_at=None, **where)
            return False
        accounted = current is not None and current.state not in (S.STOPPED, S.FAILED)
    if not accounted:
        logger.warning("instance %s was removed while it started: stopping its engine", instance.pk)
        backend.stop_orphan(instance.pk, settings.SWITCHYARD_FLEET_STOP_GRACE_SECONDS)
    return False
