"""Instance writes made by the fleet workers: every state change is one audited transaction."""
from django.db import transaction
from django.utils import timezone

from audit.actor import Actor
from audit.services import record_event
from fleet.models import Instance
from fleet.states import STATE_TIMESTAMP, InstanceState, InvalidTransition, check_transition
from fleet.views import instance_view

FLEET = Actor.system("fleet")
UPDATABLE = frozenset({"endpoint_url", "port", "runtime_handle", "failure_reason", "pending_reason", "log_tail",
                       "launch_claim", "launch_claimed_at",
                       "released_at", "drain_deadline", "consecutive_health_failures", "last_health_ok",
                       "last_health_error", "last_health_at", "metrics"})


@transaction.atomic
def transition_instance(instance_id: int, new_state: str, *, actor: Actor = FLEET, **fields) -> Instance:
    """Move an instance along the state machine (InvalidTransition otherwise) and audit it."""
    instance = _locked(instance_id)
    check_transition(instance.state, new_state)
    before = instance_view(instance)
    instance.state = new_state
    setattr(instance, STATE_TIMESTAMP[new_state], timezone.now())
    _assign(instance, fields)
    instance.save()
    record_event(actor=actor, action=f"fleet.instance.{new_state}", tenant=instance.deployment.tenant,
                 target=instance, before=before, after=instance_view(instance))
    return instance


@transaction.atomic
def set_role(instance_id: int, role: str, *, actor: Actor = FLEET) -> Instance:
    """Promote a warm instance to serving or make a serving one warm: a routing change only, audited."""
    instance = _locked(instance_id)
    if instance.role == role:
        return instance
    before = instance_view(instance)
    instance.role = role
    instance.save(update_fields=["role"])
    track_warm_time(instance)
    action = "fleet.instance.promote" if role == "serving" else "fleet.instance.demote"
    record_event(actor=actor, action=action, tenant=instance.deployment.tenant, target=instance, before=before,
                 after=instance_view(instance))
    return instance


def track_warm_time(instance: Instance) -> None:
    """Open a warm span when an instance becomes warm, close it when it is promoted (cost: warm idle capacity)."""
    from fleet.models import WarmSpan

    now = timezone.now()
    if instance.role == "warm":
        WarmSpan.objects.create(instance=instance, started_at=now)
    else:
        WarmSpan.objects.filter(instance=instance, ended_at__isnull=True).update(ended_at=now)


def try_transition(instance_id: int, new_state: str, **fields) -> Instance | None:
    """`transition_instance`, or None when another worker already moved the instance on (a race we accept)."""
    try:
        return transition_instance(instance_id, new_state, **fields)
    except (InvalidTransition, Instance.DoesNotExist):
        return None


@transaction.atomic
def fail_instance(instance_id: int, reason: str) -> Instance | None:
    """Mark an instance failed and have its process cleaned up and replaced."""
    from fleet.tasks import replace_failed

    instance = try_transition(instance_id, "failed", failure_reason=reason[:500])
    if instance is not None:
        transaction.on_commit(lambda: replace_failed.delay(instance_id))
    return instance


@transaction.atomic
def release_instance(instance_id: int, *, log_tail: str) -> Instance | None:
    """Record that a failed instance's process is gone, with the end of its log."""
    instance = _locked(instance_id)
    if instance.released_at is not None:
        return None
    instance.released_at = timezone.now()
    instance.log_tail = log_tail[-20000:]
    instance.save(update_fields=["released_at", "log_tail"])
    record_event(actor=FLEET, action="fleet.instance.release", tenant=instance.deployment.tenant,
                 target=instance, after={**instance_view(instance), "log_tail_lines": log_tail.count("\n") + 1})
    return instance


def record_probe(instance_id: int, *, ok: bool, error: str = "", metrics: dict | None = None) -> Instance:
    """Store one health probe's outcome (not audited: it is observation, not a change of state)."""
    instance = Instance.objects.get(pk=instance_id)
    instance.consecutive_health_failures = 0 if ok else instance.consecutive_health_failures + 1
    instance.last_health_ok, instance.last_health_error = ok, error[:500]
    instance.last_health_at = timezone.now()
    fields = ["consecutive_health_failures", "last_health_ok", "last_health_error", "last_health_at"]
    if metrics is not None:
        instance.metrics = metrics
        fields.append("metrics")
    # A plain update of observation columns: a concurrent state change is never overwritten.
    Instance.objects.filter(pk=instance_id).update(**{name: getattr(instance, name) for name in fields})
    return instance


def record_pending_reason(instance_ids: list[int], reason: str) -> None:
    """Say why pending instances wait (not audited: observation, rewritten as free memory changes)."""
    reason = reason[:300]
    (Instance.objects.filter(pk__in=instance_ids, state=InstanceState.PENDING).exclude(pending_reason=reason)
     .update(pending_reason=reason))


def _locked(instance_id: int) -> Instance:
    return Instance.objects.select_for_update(of=("self",)).select_related("deployment__tenant").get(pk=instance_id)


def _assign(instance: Instance, fields: dict) -> None:
    unknown = set(fields) - UPDATABLE
    if unknown:
        raise ValueError(f"not updatable by a transition: {sorted(unknown)}")
    for name, value in fields.items():
        setattr(instance, name, value)
