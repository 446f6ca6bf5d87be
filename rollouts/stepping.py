"""One step of a rollout (the beat task runs it every few seconds): read the figures, judge, act.

pending → ramping once every engine of the new version the first stage and a rollback need is ready;
ramping: a failing gate rolls back at once, a baked stage with every gate holding advances (the
last one promotes), a stage still short of requests a data timeout after its bake pauses for a
person to decide; paused:
only a failing gate acts. After a promotion the old version is retired when its grace is over.
"""
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from rollouts import selectors, services
from rollouts.gates import Figures, Gates, Observation, Verdict, evaluate
from rollouts.models import Rollout, RolloutState

R = RolloutState


def step(rollout_id: int) -> str:
    """Advance one rollout as far as its figures allow now; returns what happened.

    Two steps of one rollout may run at once (the periodic pass and one queued after a change): every
    service re-checks the state under the rollout's lock, so the later one is refused and does nothing."""
    try:
        return _step(rollout_id)
    except ValidationError:
        return "raced"


def _step(rollout_id: int) -> str:
    rollout = (Rollout.objects.select_related("deployment__model_version", "from_version", "to_version")
               .filter(pk=rollout_id).first())
    if rollout is None:
        return "gone"
    if rollout.state == R.PENDING:
        return _step_pending(rollout)
    if rollout.state in (R.RAMPING, R.PAUSED):
        return _step_ramping(rollout)
    if rollout.state == R.PROMOTED and rollout.previous_retired_at is None and _grace_over(rollout):
        services.retire_previous_version(rollout)
        return "retired"
    return "idle"


def _step_pending(rollout: Rollout) -> str:
    failed = selectors.failed_engines(rollout)
    if failed:
        services.roll_back_rollout(rollout, actor=services.ROLLOUTS,
                                   reason=f"{failed} engine(s) of {rollout.to_version} failed to start")
        return "aborted"
    needed = max(1, rollout.deployment.serving_target)
    if selectors.ready_instances(rollout, rollout.to_version_id) >= needed:
        gates = Gates.from_json(rollout.gates)
        now = timezone.now()
        baseline = selectors.figures(rollout.deployment, rollout.from_version_id,
                                     now - timedelta(seconds=gates.window_seconds), now)
        services.begin_ramping(rollout, baseline=_figures_json(baseline))
        return "ramping"
    deadline = rollout.created_at + timedelta(seconds=settings.SWITCHYARD_ROLLOUT_START_DEADLINE_SECONDS)
    if timezone.now() > deadline:
        services.roll_back_rollout(rollout, actor=services.ROLLOUTS,
                                   reason=f"{rollout.to_version} was not ready within the start deadline")
        return "aborted"
    return "waiting"


def _step_ramping(rollout: Rollout) -> str:
    gates = Gates.from_json(rollout.gates)
    seen = observe(rollout, gates)
    verdict = evaluate(gates, seen)
    figures = {**verdict.as_json(), "new": _figures_json(seen.new), "old": _figures_json(seen.old),
               "weight": rollout.weight, "stage": rollout.stage_index, "at": timezone.now().isoformat()}
    services.record_evaluation(rollout, figures)
    if verdict.verdict == Verdict.FAIL:
        services.roll_back_rollout(rollout, actor=services.ROLLOUTS, reason="; ".join(verdict.reasons),
                                   figures=figures)
        return "rolled_back"
    if rollout.state == R.PAUSED:
        return "paused"
    if verdict.verdict == Verdict.INSUFFICIENT:
        services.pause_rollout(rollout, actor=services.ROLLOUTS, reason="; ".join(verdict.reasons), figures=figures)
        return "paused"
    if verdict.verdict == Verdict.PASS:
        if rollout.stage_index + 1 >= len(rollout.stages):
            services.promote_rollout(rollout, actor=services.ROLLOUTS, figures=figures)
            return "promoted"
        services.advance_rollout(rollout, figures=figures)
        return "advanced"
    return "baking"


def observe(rollout: Rollout, gates: Gates) -> Observation:
    """Both versions' figures since the stage began (at most the gate window), and the new version's health."""
    now = timezone.now()
    since = max(rollout.stage_started_at or now, now - timedelta(seconds=gates.window_seconds))
    bake = rollout.stages[rollout.stage_index]["bake_seconds"]
    started = rollout.stage_started_at
    baked = started is not None and now >= started + timedelta(seconds=bake)
    overdue = started is not None and now >= started + timedelta(seconds=bake + gates.data_timeout_seconds)
    baseline = Figures(**rollout.baseline) if rollout.baseline else None
    return Observation(new=selectors.figures(rollout.deployment, rollout.to_version_id, since),
                       old=selectors.figures(rollout.deployment, rollout.from_version_id, since),
                       old_baseline=baseline, failed_engines=selectors.failed_engines(rollout), baked=baked,
                       overdue=overdue)


def _grace_over(rollout: Rollout) -> bool:
    promoted = rollout.promoted_at
    return promoted is not None and promoted + timedelta(seconds=rollout.grace_seconds) <= timezone.now()


def _figures_json(figures: Figures) -> dict:
    return {"requests": figures.requests, "errors": figures.errors, "ttft_p95_ms": figures.ttft_p95_ms}


def step_all() -> dict:
    """Step every rollout that may need it (active ones, and promoted ones whose old version is still warm)."""
    from rollouts.models import ACTIVE_STATES

    ids = list(Rollout.objects.filter(state__in=ACTIVE_STATES).values_list("pk", flat=True))
    ids += list(Rollout.objects.filter(state=R.PROMOTED, previous_retired_at__isnull=True)
                .values_list("pk", flat=True))
    return {str(pk): step(pk) for pk in ids}
