"""A deployment's rollout, live: stage, weights, A-vs-B charts, gate verdicts, and the buttons (rollouts services).

Readable by whoever reads the deployment; started and steered by whoever manages it, as in the REST API
(rollouts/api/views.py). The live panel is a fragment the page's poller swaps in every few seconds.
"""
from datetime import datetime, timedelta

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST, require_safe

from audit.actor import Actor
from console.access import FLEET, can_manage_fleet, page_or_404
from console.charts import versions_chart
from console.forms.rollouts import RolloutForm
from console.views.common import form_errors, run_service
from console.views.fleet import _deployment_or_404, _writable
from rollouts import selectors, services
from rollouts.gates import Gates, evaluate, reference
from rollouts.models import ACTIVE_STATES, Rollout, RolloutState
from rollouts.stepping import observe

BUCKETS = 12
MAX_SPAN = timedelta(hours=1)
HISTORY = 10
ACTIONS = {"pause": services.pause_rollout, "resume": services.resume_rollout, "promote": services.promote_rollout,
           "roll-back": services.roll_back_rollout}
DONE = {"pause": "Rollout paused: weights hold, gates keep watching.", "resume": "Rollout resumed.",
        "promote": "Promoted: all traffic goes to the new version.",
        "roll-back": "Rolled back: all traffic goes to the old version."}


def _rollouts(deployment):
    return deployment.rollouts.select_related("from_version__model", "to_version__model")


def _shown(deployment) -> Rollout | None:
    """The rollout in progress, else the latest one."""
    return _rollouts(deployment).filter(state__in=ACTIVE_STATES).first() or _rollouts(deployment).first()


@login_required
@require_safe
def rollout_page(request, pk):
    deployment = _deployment_or_404(request, pk)
    can_manage = can_manage_fleet(page_or_404(request, FLEET), deployment.tenant)
    rollout = _shown(deployment)
    startable = can_manage and (rollout is None or not rollout.active)
    return render(request, "console/fleet/rollout.html", {
        "deployment": deployment, "rollout": rollout, "can_manage": can_manage,
        "form": RolloutForm(deployment=deployment) if startable else None,
        "history": list(_rollouts(deployment)[:HISTORY]), **_live(rollout)})


@login_required
@require_safe
def rollout_live(request, pk):
    """The live panel alone, for the page's poller."""
    rollout = _shown(_deployment_or_404(request, pk))
    return render(request, "console/fleet/_rollout_live.html", {"rollout": rollout, **_live(rollout)})


def _live(rollout: Rollout | None) -> dict:
    if rollout is None:
        return {}
    gates = Gates.from_json(rollout.gates)
    return {"weights": _weights(rollout), "stages": _stages(rollout), "gates": gates,
            "verdict": _verdict(rollout, gates), "grace": selectors.grace_cost(rollout), **_charts(rollout)}


def _weights(rollout: Rollout) -> list[dict]:
    b = rollout.weight if rollout.state in (RolloutState.RAMPING, RolloutState.PAUSED) else (
        1.0 if rollout.state == RolloutState.PROMOTED else 0.0)
    return [{"slot": "A", "version": rollout.from_version, "percent": round((1 - b) * 100, 1)},
            {"slot": "B", "version": rollout.to_version, "percent": round(b * 100, 1)}]


def _stages(rollout: Rollout) -> list[dict]:
    current = rollout.stage_index if rollout.stage_started_at else -1
    return [{"number": n + 1, "percent": round(stage["weight"] * 100, 1), "bake_seconds": stage["bake_seconds"],
             "current": n == current and rollout.active, "done": n < current or rollout.state == RolloutState.PROMOTED}
            for n, stage in enumerate(rollout.stages)]


def _verdict(rollout: Rollout, gates: Gates) -> dict | None:
    """The gates as judged now (while ramping or paused), else the latest evaluation on record."""
    if rollout.state not in (RolloutState.RAMPING, RolloutState.PAUSED):
        return rollout.last_evaluation or None
    seen = observe(rollout, gates)
    old = reference(gates, seen)
    return {**evaluate(gates, seen).as_json(), "new": _figures(seen.new), "old": _figures(seen.old),
            "reference": _figures(old) if old is not None else None, "failed_engines": seen.failed_engines,
            "baked": seen.baked}


def _figures(figures) -> dict:
    return {"requests": figures.requests, "errors": figures.errors, "error_rate": figures.error_rate * 100,
            "ttft_p95_ms": figures.ttft_p95_ms}


def _charts(rollout: Rollout) -> dict:
    """A's and B's error rate and p95 TTFT in equal intervals since the rollout began (at most the last hour)."""
    end = rollout.finished_at or timezone.now()
    start = max(rollout.created_at, end - MAX_SPAN)
    step = max((end - start) / BUCKETS, timedelta(seconds=1))
    edges = [start + step * n for n in range(BUCKETS + 1)]
    series: dict[str, list[tuple[datetime, float | None]]] = {rollout.from_version.version: [],
                                                               rollout.to_version.version: []}
    errors: dict[str, list[tuple[datetime, float | None]]] = {label: [] for label in series}
    for version, label in ((rollout.from_version_id, rollout.from_version.version),
                           (rollout.to_version_id, rollout.to_version.version)):
        for since, until in zip(edges, edges[1:]):
            seen = selectors.figures(rollout.deployment, version, since, until)
            errors[label].append((until, seen.error_rate * 100 if seen.requests else None))
            series[label].append((until, seen.ttft_p95_ms))
    return {"error_chart": versions_chart(errors, title="Error rate, A vs B", value_label="%"),
            "ttft_chart": versions_chart(series, title="p95 time to first token, A vs B", value_label="ms")}


@login_required
@require_POST
def rollout_start(request, pk):
    deployment = _writable(request, pk)
    form = RolloutForm(request.POST, deployment=deployment)
    if not form.is_valid():
        form_errors(request, form)
    else:
        run_service(request, lambda: services.start_rollout(deployment, actor=Actor.from_request(request),
                                                            **form.service_arguments()),
                    "Rollout started: the new version's engines are warming up before traffic moves.")
    return redirect("console:rollout", pk=pk)


@login_required
@require_POST
def rollout_action(request, pk, rollout_id, action):
    deployment = _writable(request, pk)
    rollout = deployment.rollouts.filter(pk=rollout_id).first()
    if rollout is None:
        raise Http404("No such rollout.")
    run_service(request, lambda: ACTIONS[action](rollout, actor=Actor.from_request(request)), DONE[action])
    return redirect("console:rollout", pk=pk)
