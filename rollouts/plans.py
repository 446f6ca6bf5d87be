"""Stages of a rollout: the defaults per strategy, and the rules a given list must meet."""
from django.core.exceptions import ValidationError

from rollouts.models import RolloutStrategy

MAX_STAGES = 10
MAX_BAKE_SECONDS = 7 * 24 * 3600
DEFAULT_STAGES = {
    RolloutStrategy.CANARY: ({"weight": 0.1, "bake_seconds": 900}, {"weight": 0.5, "bake_seconds": 900},
                             {"weight": 1.0, "bake_seconds": 300}),
    # The new version is brought up to full size (warm) before this single stage moves all traffic.
    RolloutStrategy.BLUE_GREEN: ({"weight": 1.0, "bake_seconds": 300},),
}


def default_stages(strategy: str) -> list[dict]:
    return [dict(stage) for stage in DEFAULT_STAGES[RolloutStrategy(strategy)]]


def clean_stages(strategy: str, stages: list[dict] | None) -> list[dict]:
    """The stages to store: the strategy's defaults, or `stages` checked (rising weights ending at 1)."""
    if not stages:
        return default_stages(strategy)
    if not isinstance(stages, list) or not 1 <= len(stages) <= MAX_STAGES:
        raise ValidationError({"stages": f"Give 1 to {MAX_STAGES} stages."})
    cleaned = [_stage(stage) for stage in stages]
    weights = [stage["weight"] for stage in cleaned]
    if any(b <= a for a, b in zip(weights, weights[1:])) or weights[-1] != 1.0:
        raise ValidationError({"stages": "Weights must rise from stage to stage and the last must be 1."})
    if strategy == RolloutStrategy.BLUE_GREEN and len(cleaned) != 1:
        raise ValidationError({"stages": "A blue-green rollout has one stage (weight 1)."})
    return cleaned


def _stage(stage) -> dict:
    if not isinstance(stage, dict) or set(stage) - {"weight", "bake_seconds"}:
        raise ValidationError({"stages": 'Each stage is {"weight": 0..1, "bake_seconds": n}.'})
    weight, bake = stage.get("weight"), stage.get("bake_seconds", 900)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight <= 1:
        raise ValidationError({"stages": "A stage's weight is a number above 0 and at most 1."})
    if isinstance(bake, bool) or not isinstance(bake, int) or not 0 <= bake <= MAX_BAKE_SECONDS:
        raise ValidationError({"stages": f"bake_seconds is a whole number from 0 to {MAX_BAKE_SECONDS}."})
    return {"weight": float(weight), "bake_seconds": bake}


GATE_BOUNDS = {"max_error_rate": (0.0, 1.0), "error_rate_ratio": (1.0, 100.0), "error_rate_margin": (0.0, 1.0),
               "ttft_p95_ratio": (1.0, 100.0), "ttft_p95_margin_ms": (0.0, 60_000.0), "min_requests": (0, 1_000_000),
               "window_seconds": (10, 86400), "data_timeout_seconds": (0, 7 * 86400)}


def clean_gates(gates: dict | None) -> dict:
    """Every gate threshold, defaults filled in; a value out of its range names the gate."""
    from rollouts.gates import Gates

    given = dict(gates or {})
    unknown = set(given) - set(GATE_BOUNDS)
    if unknown:
        raise ValidationError({"gates": f"Unknown gate(s): {', '.join(sorted(unknown))}."})
    for name, value in given.items():
        low, high = GATE_BOUNDS[name]
        integral = name in ("min_requests", "window_seconds", "data_timeout_seconds")
        kind_ok = isinstance(value, int) if integral else isinstance(value, (int, float))
        if isinstance(value, bool) or not kind_ok or not low <= value <= high:
            kind = "whole number" if integral else "number"
            raise ValidationError({"gates": f"{name} must be a {kind} from {low} to {high}."})
    return Gates.from_json(given).as_json()
