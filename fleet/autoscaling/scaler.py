"""One autoscale pass: sample every deployment, decide for those with a policy on, apply the changes.

Runs under the `fleet.autoscale` lease (one pass at a time, across workers). A decision that
changes the serving size goes through `fleet.services.apply_scaling_decision` (stored, audited,
reconciled on commit); holds are not stored — the samples show them.
"""
from datetime import timedelta

from django.utils import timezone

from fleet import leases, reconcile
from fleet.autoscaling import policy, signals
from fleet.models import Deployment, DeploymentStatus, ScalingPolicy
from fleet.states import InstanceState

PASS_SECONDS = 30


def rules_of(scaling: ScalingPolicy) -> policy.Rules:
    deployment = scaling.deployment
    return policy.Rules(
        min_replicas=deployment.min_replicas, max_replicas=deployment.max_replicas,
        queue_per_instance=scaling.queue_per_instance, kv_cache_usage=scaling.kv_cache_usage,
        ttft_p95_slo_ms=scaling.ttft_p95_slo_ms, up_window_seconds=scaling.up_window_seconds,
        low_water_per_instance=scaling.low_water_per_instance, idle_window_seconds=scaling.idle_window_seconds,
        zero_after_idle_seconds=scaling.zero_after_idle_seconds, cooldown_up_seconds=scaling.cooldown_up_seconds,
        cooldown_down_seconds=scaling.cooldown_down_seconds, max_step=scaling.max_step)


def situation_of(scaling: ScalingPolicy, now) -> policy.Situation:
    deployment = scaling.deployment
    busy = deployment.instances.filter(state=InstanceState.DRAINING).exists() or _rolling_out(deployment)
    return policy.Situation(
        now=now.timestamp(), serving=deployment.serving_target,
        last_scale_up_at=scaling.last_scale_up_at.timestamp() if scaling.last_scale_up_at else None,
        last_scale_down_at=scaling.last_scale_down_at.timestamp() if scaling.last_scale_down_at else None,
        busy=busy, wake_requested=scaling.wake_requested_at is not None)


def _rolling_out(deployment) -> bool:
    """A rollout of this deployment in progress (the rollouts app answers once it exists)."""
    check = getattr(deployment, "rollout_in_progress", None)
    return bool(check() if callable(check) else False)


def run_pass() -> dict:
    with leases.held("fleet.autoscale", ttl=PASS_SECONDS) as ours:
        if not ours:
            return {"skipped": 1}
        counts = {"sampled": 0, "changed": 0}
        for deployment in Deployment.objects.filter(status=DeploymentStatus.ACTIVE).select_related("scaling"):
            counts["sampled"] += 1
            counts["changed"] += scale_one(deployment)
        signals.prune()
        return counts


def scale_one(deployment: Deployment) -> int:
    """Sample one deployment and, if its policy is on, decide and apply; 1 when its size changed."""
    from fleet.services import apply_scaling_decision

    previous = deployment.demand_samples.order_by("-at").values_list("at", flat=True).first()
    now = timezone.now()
    signals.measure(deployment, previous or now - timedelta(seconds=5)).save()
    scaling = getattr(deployment, "scaling", None)
    if scaling is None or not scaling.enabled:
        return 0
    rules = rules_of(scaling)
    window = max(rules.up_window_seconds, rules.idle_window_seconds, rules.zero_after_idle_seconds) + 30
    decision = policy.decide(rules, signals.recent(deployment, window), situation_of(scaling, now))
    if not decision.changes:
        return 0
    apply_scaling_decision(deployment, decision)
    if decision.action == "up":
        reconcile.move_roles(deployment.pk)  # promote warm instances in this pass; the reconcile task launches
    return 1
