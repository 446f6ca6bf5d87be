"""Frozen dictionaries of rollouts for audit events."""


def rollout_view(rollout) -> dict:
    return {"deployment": rollout.deployment_id, "from_version": str(rollout.from_version),
            "to_version": str(rollout.to_version), "strategy": rollout.strategy, "state": rollout.state,
            "state_reason": rollout.state_reason, "stage": rollout.stage_index, "weight": rollout.weight,
            "stages": rollout.stages, "gates": rollout.gates, "sticky_by": rollout.sticky_by,
            "grace_seconds": rollout.grace_seconds, "reverses": rollout.reverses_id}
