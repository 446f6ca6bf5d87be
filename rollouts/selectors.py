"""Reads of the rollouts app: what a deployment's rollout asks of the fleet and the gateway, and the live
per-version figures its gates judge (from the usage records the gateway writes every second)."""
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from fleet.versions import VersionPlan
from rollouts.gates import Figures
from rollouts.models import ACTIVE_STATES, Rollout, RolloutState

MAX_TTFT_SAMPLES = 50_000
JUDGED = ("ok", "upstream_error", "timeout")  # client errors, limits and cancellations say nothing of a version
ENGINE_ERRORS = ("upstream_error", "timeout")


def active_rollout(deployment_id: int) -> Rollout | None:
    return Rollout.objects.filter(deployment_id=deployment_id, state__in=ACTIVE_STATES).first()


def in_grace(deployment_id: int, now: datetime | None = None) -> Rollout | None:
    """The latest promoted rollout whose old version is still kept warm."""
    latest = (Rollout.objects.filter(deployment_id=deployment_id, state=RolloutState.PROMOTED)
              .order_by("-promoted_at").first())
    if latest is None or latest.previous_retired_at is not None or latest.promoted_at is None:
        return None
    if latest.promoted_at + timedelta(seconds=latest.grace_seconds) <= (now or timezone.now()):
        return None
    return latest


def version_plan_for(deployment) -> VersionPlan:
    """Traffic weights while a rollout is active; the old version kept warm during a promotion's grace."""
    rollout = active_rollout(deployment.pk)
    if rollout is not None:
        weights = {rollout.from_version_id: 1.0 - rollout.weight, rollout.to_version_id: rollout.weight}
        return VersionPlan(weights=weights)
    promoted = in_grace(deployment.pk)
    if promoted is not None and promoted.from_version_id != deployment.model_version_id:
        return VersionPlan(keep_warm={promoted.from_version_id: deployment.serving_target})
    return VersionPlan()


def routing_weights() -> dict[int, tuple[tuple[int, float], ...]]:
    """Deployment id → ((version, weight), …), new version first, for deployments whose traffic is split."""
    rollouts = Rollout.objects.filter(state__in=(RolloutState.RAMPING, RolloutState.PAUSED))
    return {r.deployment_id: ((r.to_version_id, r.weight), (r.from_version_id, 1.0 - r.weight)) for r in rollouts}


def sticky_modes() -> dict[int, str]:
    return dict(Rollout.objects.filter(state__in=ACTIVE_STATES).values_list("deployment_id", "sticky_by"))


def version_instances(deployment, version_id: int) -> list[int]:
    """Every instance (any state) of the deployment that runs this version."""
    same = Q(model_version_id=version_id)
    if version_id == deployment.model_version_id:
        same |= Q(model_version__isnull=True)
    return list(deployment.instances.filter(same).values_list("pk", flat=True))


def figures(deployment, version_id: int, since: datetime, until: datetime | None = None) -> Figures:
    """The version's judged requests, engine errors and p95 TTFT in this deployment over [since, until)."""
    from usage.models import UsageEvent

    instances = version_instances(deployment, version_id)
    if not instances:
        return Figures()
    window = Q(occurred_at__gte=since) & (Q(occurred_at__lt=until) if until else Q())
    served = UsageEvent.objects.filter(window, model_version_id=version_id, instance_id__in=instances,
                                       outcome__in=JUDGED, cache_hit=False)
    counts = served.values_list("outcome", flat=True)
    outcomes = list(counts)
    # A request that failed on this version before its first byte and was answered by another engine.
    retried = UsageEvent.objects.filter(window, retried_instance_id__in=instances).count()
    errors = sum(1 for outcome in outcomes if outcome in ENGINE_ERRORS) + retried
    ttfts = [ms for ms in served.filter(outcome="ok", ttft_ms__isnull=False).order_by("-occurred_at")
             .values_list("ttft_ms", flat=True)[:MAX_TTFT_SAMPLES] if ms is not None]
    return Figures(requests=len(outcomes) + retried, errors=errors, ttft_p95_ms=p95(ttfts))


def p95(values: list[float]) -> float | None:
    """Nearest-rank 95th percentile; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]


def failed_engines(rollout: Rollout) -> int:
    """Engines of the new version that failed since the rollout started (its engine-health gate)."""
    from fleet.states import InstanceState

    return (rollout.deployment.instances.filter(model_version_id=rollout.to_version_id, state=InstanceState.FAILED,
                                                failed_at__gte=rollout.created_at).count())


def ready_instances(rollout: Rollout, version_id: int) -> int:
    """Ready engines of a version (serving or warm); a rollout stamps every instance with its version."""
    from fleet.states import InstanceState

    return rollout.deployment.instances.filter(model_version_id=version_id, state=InstanceState.READY).count()


def grace_cost(rollout: Rollout, now: datetime | None = None) -> dict | None:
    """A promoted rollout's old version kept warm (its grace period): engines, warm time and idle cost so far,
    the hourly rate at today's price and when it is retired. None for a rollout that was not promoted."""
    from decimal import Decimal

    from fleet.models import Instance, InstanceRole, WarmSpan
    from fleet.states import InstanceState
    from usage.cost.prices import PriceHistory, held_resources, unit_of

    if rollout.state != RolloutState.PROMOTED or rollout.promoted_at is None:
        return None
    now = now or timezone.now()
    start, end = rollout.promoted_at, min(now, rollout.previous_retired_at or now)
    engines = Instance.objects.filter(deployment_id=rollout.deployment_id, model_version_id=rollout.from_version_id)
    spans = WarmSpan.objects.filter(instance__in=engines, started_at__lt=end).exclude(ended_at__lte=start)
    seconds = sum(((min(s.ended_at or end, end) - max(s.started_at, start)).total_seconds() for s in spans), 0.0)
    resource, units = held_resources(rollout.deployment)
    price = PriceHistory().at(now).get(resource)
    warm = engines.filter(state=InstanceState.READY, role=InstanceRole.WARM)
    warm_now = 0 if rollout.previous_retired_at else warm.count()
    per_second = (price or Decimal(0)) * units / 3600
    return {"engines_warm": warm_now, "warm_seconds": round(seconds, 1),
            "idle_cost_usd": round(float(per_second * Decimal(repr(seconds))), 6),
            "hourly_usd": round(float(per_second * 3600 * warm_now), 6), "priced": price is not None,
            "unit": unit_of(resource), "units_per_engine": units,
            "retire_at": rollout.promoted_at + timedelta(seconds=rollout.grace_seconds),
            "retired_at": rollout.previous_retired_at}
