"""Rollout writes: each in one transaction with its audit event (and the figures that caused it).

A write that moves traffic also moves the engines' roles in the same transaction (each version's
serving and warm instances follow the new weight, `fleet.reconcile.move_roles`), so no gateway ever
loads a snapshot whose weights send traffic to a version with no serving engine yet, or whose
promoted version's engines are still warm. On commit the change bus carries the audit events to every
gateway, which reloads its pools, and a reconcile pass starts or stops what the new targets need —
moving the weight back is a routing change that needs no engine start.
"""
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.actor import Actor
from audit.services import record_event
from fleet.caps import second_set_problem
from fleet.models import Deployment, DeploymentStatus
from models_registry.models import VersionStatus
from rollouts import plans
from rollouts.models import ACTIVE_STATES, DEFAULT_GRACE_SECONDS, Rollout, RolloutState, RolloutStrategy, StickyBy
from rollouts.views import rollout_view

R = RolloutState
ROLLOUTS = Actor.system("rollouts")


def _lock_deployment(pk: int) -> Deployment:
    return (Deployment.objects.select_for_update(of=("self",)).select_related("tenant", "model_version__model")
            .get(pk=pk))


def _lock(rollout: Rollout) -> Rollout:
    _lock_deployment(rollout.deployment_id)  # the deployment first, always: the same order as start_rollout
    return (Rollout.objects.select_for_update(of=("self",))
            .select_related("deployment__tenant", "deployment__model_version__model", "from_version__model",
                            "to_version__model").get(pk=rollout.pk))


def _on_commit(rollout: Rollout) -> None:
    from fleet.tasks import reconcile
    from rollouts.tasks import step

    deployment_id, rollout_id = rollout.deployment_id, rollout.pk
    transaction.on_commit(lambda: reconcile.delay(deployment_id))
    transaction.on_commit(lambda: step.delay(rollout_id))


def _move_roles(rollout: Rollout) -> None:
    """Promote and demote engines to the weights just saved, in this transaction (before any audit write:
    reconcile locks instance rows before it writes its own audit events, as every fleet writer does). Starting
    and stopping engines stays with the reconcile pass queued on commit."""
    from fleet.reconcile import move_roles

    move_roles(rollout.deployment_id, sizes=False)


def _audit(rollout: Rollout, action: str, *, actor: Actor, before: dict | None = None, **extra) -> None:
    record_event(actor=actor, action=f"rollout.{action}", tenant=rollout.deployment.tenant, target=rollout,
                 before=before, after={**rollout_view(rollout), **extra})


@transaction.atomic
def start_rollout(deployment: Deployment, *, to_version, actor: Actor, strategy: str = RolloutStrategy.CANARY,
                  stages: list | None = None, gates: dict | None = None, sticky_by: str = StickyBy.SESSION,
                  grace_seconds: int = DEFAULT_GRACE_SECONDS, reverses: Rollout | None = None) -> Rollout:
    """Begin moving a deployment to another published version of its model; its engines start warm first."""
    deployment = _lock_deployment(deployment.pk)
    _check_startable(deployment, to_version, strategy, sticky_by)
    # From here on every engine names its version: a promotion changes the deployment's, not theirs.
    deployment.instances.filter(model_version__isnull=True).update(model_version=deployment.model_version)
    rollout = Rollout(deployment=deployment, from_version=deployment.model_version, to_version=to_version,
                      strategy=strategy, stages=plans.clean_stages(strategy, stages), gates=plans.clean_gates(gates),
                      sticky_by=sticky_by, grace_seconds=grace_seconds, reverses=reverses,
                      created_by=actor.label[:200])
    rollout.full_clean(exclude=["deployment", "from_version", "to_version", "reverses"], validate_constraints=False)
    rollout.save()
    _audit(rollout, "start", actor=actor)
    _on_commit(rollout)
    return rollout


def _check_startable(deployment: Deployment, to_version, strategy: str, sticky_by: str) -> None:
    errors = {}
    if strategy not in RolloutStrategy.values:
        errors["strategy"] = f"One of {', '.join(RolloutStrategy.values)}."
    if sticky_by not in StickyBy.values:
        errors["sticky_by"] = f"One of {', '.join(StickyBy.values)}."
    if to_version.model_id != deployment.model_version.model_id:
        errors["to_version"] = f"Must be a version of {deployment.model_version.model.name}, the deployment's model."
    elif to_version.pk == deployment.model_version_id:
        errors["to_version"] = "The deployment already serves this version."
    elif to_version.status != VersionStatus.PUBLISHED:
        errors["to_version"] = f"Only published versions can be rolled out (this one is {to_version.status})."
    if deployment.status != DeploymentStatus.ACTIVE:
        errors["deployment"] = "The deployment is being deleted (draining)."
    elif deployment.serving_target == 0:
        errors["deployment"] = "The deployment is asleep at zero: wake it (or raise min_replicas) first."
    elif deployment.rollouts.filter(state__in=ACTIVE_STATES).exists():
        errors["deployment"] = "A rollout of this deployment is already in progress."
    else:
        problem = second_set_problem(deployment, deployment.serving_target)
        if problem:
            errors["deployment"] = problem
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def begin_ramping(rollout: Rollout, *, baseline: dict, actor: Actor = ROLLOUTS) -> Rollout:
    """The new version is warm: its first stage's weight goes live; the old version's figures are the baseline."""
    rollout = _lock(rollout)
    _require(rollout, (R.PENDING,))
    _set_stage(rollout, 0)
    rollout.state, rollout.state_reason, rollout.baseline = R.RAMPING, "", baseline
    rollout.save()
    _move_roles(rollout)
    _audit(rollout, "ramp", actor=actor, before={"state": R.PENDING}, baseline=baseline)
    _on_commit(rollout)
    return rollout


@transaction.atomic
def advance_rollout(rollout: Rollout, *, figures: dict, actor: Actor = ROLLOUTS) -> Rollout:
    """The stage baked with every gate holding: the next stage's weight goes live (once: a second step
    that judged the same stage finds it moved on)."""
    judged = rollout.stage_index
    rollout = _lock(rollout)
    _require(rollout, (R.RAMPING,))
    if rollout.stage_index != judged or judged + 1 >= len(rollout.stages):
        raise ValidationError({"stage": "The rollout has moved on since its figures were read."})
    before = {"stage": rollout.stage_index, "weight": rollout.weight}
    _set_stage(rollout, rollout.stage_index + 1)
    rollout.save()
    _move_roles(rollout)
    _audit(rollout, "advance", actor=actor, before=before, figures=figures)
    _on_commit(rollout)
    return rollout


def _set_stage(rollout: Rollout, index: int) -> None:
    rollout.stage_index = index
    rollout.weight = float(rollout.stages[index]["weight"])
    rollout.stage_started_at = timezone.now()


@transaction.atomic
def pause_rollout(rollout: Rollout, *, actor: Actor, reason: str = "", figures: dict | None = None) -> Rollout:
    """Hold the current weights; gates keep watching (a failing one still rolls back)."""
    rollout = _lock(rollout)
    _require(rollout, (R.PENDING, R.RAMPING))
    before = {"state": rollout.state}
    rollout.state, rollout.state_reason = R.PAUSED, (reason or f"paused by {actor.label}")[:300]
    rollout.save()
    _audit(rollout, "pause", actor=actor, before=before, figures=figures)
    return rollout


@transaction.atomic
def resume_rollout(rollout: Rollout, *, actor: Actor) -> Rollout:
    """Ramp on from the current stage; its bake time starts again, judged on requests from now."""
    rollout = _lock(rollout)
    _require(rollout, (R.PAUSED,))
    started = rollout.stage_started_at is not None
    rollout.state, rollout.state_reason = (R.RAMPING if started else R.PENDING), ""
    if started:
        rollout.stage_started_at = timezone.now()
    rollout.save()
    _audit(rollout, "resume", actor=actor, before={"state": R.PAUSED})
    _on_commit(rollout)
    return rollout


@transaction.atomic
def promote_rollout(rollout: Rollout, *, actor: Actor, figures: dict | None = None) -> Rollout:
    """All traffic to the new version, which becomes the deployment's; the old one stays warm for the grace period."""
    rollout = _lock(rollout)
    _require(rollout, (R.RAMPING, R.PAUSED))
    deployment = rollout.deployment
    before = {"state": rollout.state, "weight": rollout.weight, "model_version": str(deployment.model_version)}
    deployment.model_version = rollout.to_version
    deployment.save(update_fields=["model_version", "updated_at"])
    now = timezone.now()
    rollout.state, rollout.weight, rollout.promoted_at, rollout.finished_at = R.PROMOTED, 1.0, now, now
    rollout.state_reason = "" if figures else f"promoted by {actor.label}"
    rollout.save()
    _move_roles(rollout)
    _audit(rollout, "promote", actor=actor, before=before, figures=figures,
           model_version=str(rollout.to_version))
    _on_commit(rollout)
    return rollout


@transaction.atomic
def roll_back_rollout(rollout: Rollout, *, actor: Actor, reason: str = "", figures: dict | None = None) -> Rollout:
    """Move all traffic back to the old version (warm all along: no cold start) and let the new one go.

    A rollout still warming up is aborted instead. A promoted one is undone by a reverse rollout to its
    old version (still warm during the grace period), returned instead of this one."""
    rollout = _lock(rollout)
    if rollout.state == R.PROMOTED:
        return _reverse(rollout, actor=actor)
    _require(rollout, ACTIVE_STATES)
    before = {"state": rollout.state, "weight": rollout.weight}
    aborted = rollout.stage_started_at is None
    rollout.state = R.ABORTED if aborted else R.ROLLED_BACK
    rollout.weight, rollout.finished_at = 0.0, timezone.now()
    rollout.state_reason = (reason or f"rolled back by {actor.label}")[:300]
    rollout.save()
    _move_roles(rollout)
    _audit(rollout, "abort" if aborted else "roll_back", actor=actor, before=before, figures=figures)
    _on_commit(rollout)
    return rollout


# A rollback is the operator's verdict on the version being left: the reverse rollout judges engine
# health only, so no figure of the moment can send traffic back to the version just rejected.
REVERSE_GATES = {"min_requests": 0, "max_error_rate": 1.0, "error_rate_margin": 1.0, "ttft_p95_ratio": 100.0,
                 "ttft_p95_margin_ms": 60_000.0}


def _reverse(rollout: Rollout, *, actor: Actor) -> Rollout:
    """A blue-green rollout back to the promoted rollout's old version. Within the grace period that version
    is still warm at full size, so its traffic moves in this same call (no wait for the stepper)."""
    from rollouts import stepping

    deployment = rollout.deployment
    if deployment.model_version_id != rollout.to_version_id:
        raise ValidationError({"state": "The deployment has moved on since this rollout: roll back its latest one."})
    reverse = start_rollout(deployment, to_version=rollout.from_version, actor=actor,
                            strategy=RolloutStrategy.BLUE_GREEN, stages=[{"weight": 1.0, "bake_seconds": 0}],
                            gates=REVERSE_GATES, sticky_by=rollout.sticky_by, grace_seconds=rollout.grace_seconds,
                            reverses=rollout)
    stepping.step(reverse.pk)  # ramps at once when the old version is warm, else waits for its engines
    return Rollout.objects.get(pk=reverse.pk)


@transaction.atomic
def retire_previous_version(rollout: Rollout, *, actor: Actor = ROLLOUTS) -> Rollout:
    """The grace period after a promotion is over: the old version's warm engines are let go."""
    rollout = _lock(rollout)
    _require(rollout, (R.PROMOTED,))
    if rollout.previous_retired_at is None:
        rollout.previous_retired_at = timezone.now()
        rollout.save(update_fields=["previous_retired_at", "updated_at"])
        _audit(rollout, "retire_previous", actor=actor)
        _on_commit(rollout)
    return rollout


def record_evaluation(rollout: Rollout, evaluation: dict) -> None:
    """The latest gate figures and verdict, for the API and console (observation: not audited)."""
    Rollout.objects.filter(pk=rollout.pk).update(last_evaluation=evaluation)


def _require(rollout: Rollout, states) -> None:
    if rollout.state not in states:
        raise ValidationError({"state": f"Not possible while the rollout is {rollout.get_state_display().lower()}."})
