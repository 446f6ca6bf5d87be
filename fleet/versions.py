"""How many serving and warm instances of each model version a deployment keeps (one version, two in a rollout).

Outside a rollout every instance runs the deployment's version. During one (docs/rollouts.md) each
version serves its share of the serving target — `ceil(weight × serving)`, none at weight 0 — and
keeps the rest of a full set warm: the new version is up before any traffic moves, and the old one
stays hot while traffic leaves it, so moving the weights either way never waits for a cold start.
After a promotion the old version is kept warm for the rollout's grace period, then retired.
"""
import math
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class VersionTarget:
    serving: int
    warm: int


@dataclass(frozen=True)
class VersionPlan:
    """What the rollouts app asks of the fleet: traffic weights by version (none: no rollout) and versions
    kept warm after a promotion (version → instances)."""

    weights: Mapping[int, float] | None = None
    keep_warm: Mapping[int, int] | None = None


def share(weight: float, serving: int) -> int:
    """Serving instances a version with this traffic weight needs: at least one while it takes any traffic."""
    if weight <= 0 or serving <= 0:
        return 0
    return min(serving, max(1, math.ceil(round(weight * serving, 6))))


def plan_versions(primary: int, serving: int, warm: int, plan: VersionPlan) -> dict[int, VersionTarget]:
    """Targets per version id; a live instance of a version not listed is drained."""
    if not plan.weights:
        targets = {primary: VersionTarget(serving, warm)}
    else:
        targets = {}
        for version, weight in plan.weights.items():
            serves = share(weight, serving)
            targets[version] = VersionTarget(serves, max(0, serving - serves) + (warm if version == primary else 0))
    for version, count in (plan.keep_warm or {}).items():
        if version not in targets and count > 0 and serving > 0:  # asleep or deleting: nothing is kept
            targets[version] = VersionTarget(0, count)
    return targets


def version_plan(deployment) -> VersionPlan:
    """The rollouts app's demands on this deployment (no rollout: none)."""
    from django.apps import apps

    if not apps.is_installed("rollouts"):
        return VersionPlan()
    from rollouts.selectors import version_plan_for

    return version_plan_for(deployment)


def targets_for(deployment) -> dict[int, VersionTarget]:
    """Per version id: the deployment's targets, split as its rollout (if any) asks."""
    from fleet.models import DeploymentStatus

    if deployment.status == DeploymentStatus.DELETING:
        return {deployment.model_version_id: VersionTarget(0, 0)}
    return plan_versions(deployment.model_version_id, deployment.serving_target, deployment.warm_target,
                         version_plan(deployment))
