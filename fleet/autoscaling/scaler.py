"""One autoscale pass: sample every deployment, decide for those with a policy on, apply the changes.

Runs under the `fleet.autoscale` lease (one pass at a time, across workers); each deployment is
sampled and decided under a lease of its own, which a gateway's ask for a decision now
(`fleet.autoscale_now`, controlplane/demand_signal.py) takes too, so two decisions about one
deployment never overlap and each reads the other's outcome. A decision that changes the serving
size goes through `fleet.services.apply_scaling_decision` (stored, audited, reconciled on commit);
holds are not stored — the samples show them. After deciding, the pass leaves the gateways the
waiting count at which they should ask again before the next pass (`policy.nudge_level`). A wake
that finds the deployment's lease taken is decided by its holder if that read it, else by the next pass.
"""
from datetime import timedelta

from django.utils import timezone

from controlplane import demand_signal
from fleet import leases, reconcile
from fleet.autoscaling import policy, schedule, signals
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
        cooldown_down_seconds=scaling.cooldown_down_seconds, max_step=scaling.max_step,
        schedule=schedule.parse(scaling.schedule), schedule_lead_seconds=scaling.schedule_lead_seconds)


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
        for deployment_id in Deployment.objects.filter(status=DeploymentStatus.ACTIVE).values_list("pk", flat=True):
            counts["sampled"] += 1
            counts["changed"] += scale_one(deployment_id)
        signals.prune()
        return counts


def scale_one(deployment_id: int) -> int:
    """Sample one deployment and, if its policy is on, decide and apply; 1 when its size changed.

    Skipped (0) while another decision about it runs: that one samples and decides at this moment too."""
    with leases.held(f"fleet.autoscale.{deployment_id}", ttl=PASS_SECONDS) as ours:
        deployment = Deployment.objects.select_related("scaling").filter(pk=deployment_id).first()
        if not ours or deployment is None:
            return 0
        return _sample_and_decide(deployment)


def _sample_and_decide(deployment: Deployment) -> int:
    from fleet.services import apply_scaling_decision

    previous = deployment.demand_samples.order_by("-at").values_list("at", flat=True).first()
    sample = signals.measure(deployment, previous or timezone.now() - timedelta(seconds=5))
    sample.save()
    now = sample.at  # the decision reads the look it just took
    scaling = getattr(deployment, "scaling", None)
    if scaling is None or not scaling.enabled:
        return 0
    rules = rules_of(scaling)
    window = max(rules.up_window_seconds, rules.idle_window_seconds, rules.zero_after_idle_seconds) + 30
    situation = situation_of(scaling, now)
    decision = policy.decide(rules, signals.recent(deployment, window), situation)
    if decision.changes:
        apply_scaling_decision(deployment, decision)
        situation = situation_of(ScalingPolicy.objects.select_related("deployment").get(pk=scaling.pk), now)
    demand_signal.set_nudge_level(deployment.pk, policy.nudge_level(rules, situation))
    if decision.action == "up":
        reconcile.move_roles(deployment.pk)  # promote warm instances in this pass; the reconcile task launches
    return int(decision.changes)
