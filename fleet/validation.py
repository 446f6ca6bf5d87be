"""Rules a deployment spec must meet; each failure names the field it is about."""
from dataclasses import fields

from django.core.exceptions import ValidationError

from fleet.caps import check_caps
from fleet.models import MAX_PARALLEL_PRODUCT, MAX_REPLICAS
from fleet.runtime import backend_names, get_backend

# Flags the fleet itself sets on a simulator; a deployment may not override them.
RESERVED_SIMULATOR_PARAMS = frozenset({"host", "port", "served_model_name"})


def validate_spec(deployment) -> None:
    """Raise one ValidationError listing every problem with the deployment's spec."""
    errors: dict[str, str] = {}
    _check_version(deployment, errors)
    _check_replicas(deployment, errors)
    _check_parallelism(deployment, errors)
    _check_runtime(deployment, errors)
    _check_fallback(deployment, errors)
    if not errors.keys() & {"min_replicas", "max_replicas", "tensor_parallel_size", "pipeline_parallel_size"}:
        check_caps(deployment, errors)
    if errors:
        raise ValidationError(errors)


def _check_version(deployment, errors: dict) -> None:
    from models_registry.models import VersionStatus

    if deployment.model_version.status != VersionStatus.PUBLISHED:
        status = deployment.model_version.status
        errors["model_version"] = f"Only published versions can be deployed (this one is {status})."


def _check_replicas(deployment, errors: dict) -> None:
    for name in ("min_replicas", "max_replicas", "warm_pool_size"):
        value = getattr(deployment, name)
        if not 0 <= value <= MAX_REPLICAS:
            errors[name] = f"Must be between 0 and {MAX_REPLICAS}."
    if "max_replicas" not in errors and deployment.max_replicas < deployment.min_replicas:
        errors["max_replicas"] = "Must be at least min_replicas."


def _check_parallelism(deployment, errors: dict) -> None:
    tp, pp = deployment.tensor_parallel_size, deployment.pipeline_parallel_size
    for name, value in (("tensor_parallel_size", tp), ("pipeline_parallel_size", pp)):
        if value < 1:
            errors[name] = "Must be at least 1."
    if "tensor_parallel_size" in errors or "pipeline_parallel_size" in errors:
        return
    if tp * pp > MAX_PARALLEL_PRODUCT:
        errors["tensor_parallel_size"] = f"tensor × pipeline parallel size must be at most {MAX_PARALLEL_PRODUCT}."


def _check_runtime(deployment, errors: dict) -> None:
    """The backend must be configured; it then judges what it can run (parallelism, its own parameters)."""
    if deployment.runtime_backend not in backend_names():
        errors["runtime_backend"] = (f"No runtime backend named {deployment.runtime_backend!r}; "
                                     f"configured: {', '.join(backend_names())}.")
        return
    params = deployment.simulator_params or {}
    if not isinstance(params, dict):
        errors["simulator_params"] = "Must be an object of simulator flags."
        return
    for field, problem in get_backend(deployment.runtime_backend).spec_errors(deployment).items():
        errors.setdefault(field, problem)


def simulator_params_problem(params: dict) -> str | None:
    """Why `params` are not valid flags of `python -m simulator`, or None."""
    from fleet.runtime.simulator import VERSIONS_KEY

    per_version = params.get(VERSIONS_KEY)
    if per_version is not None:
        if not isinstance(per_version, dict) or not all(isinstance(v, dict) for v in per_version.values()):
            return f"{VERSIONS_KEY} must map version labels to simulator parameters."
        for label, overrides in per_version.items():
            problem = _flags_problem({**_without(params, VERSIONS_KEY), **overrides})
            if problem:
                return f"{VERSIONS_KEY}[{label!r}]: {problem}"
    return _flags_problem(_without(params, VERSIONS_KEY))


def _without(params: dict, key: str) -> dict:
    return {k: v for k, v in params.items() if k != key}


def _flags_problem(params: dict) -> str | None:
    from simulator.config import SimulatorConfig

    allowed = {f.name: type(f.default) for f in fields(SimulatorConfig)}
    for key, value in params.items():
        if key in RESERVED_SIMULATOR_PARAMS or key not in allowed:
            return f"Unknown or reserved simulator parameter {key!r}."
        expected = allowed[key]
        if not isinstance(value, expected) and not (expected is float and type(value) is int):
            return f"{key} must be a {expected.__name__}."
    try:
        SimulatorConfig(**params)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def _check_fallback(deployment, errors: dict) -> None:
    """A fallback must be another registered model (the gateway routes to it by name)."""
    from models_registry.models import Model

    name = deployment.fallback_model_name
    if not name:
        return
    if name == deployment.model_version.model.name:
        errors["fallback_model_name"] = "A deployment cannot fall back to its own model."
    elif not Model.objects.filter(name=name).exists():
        errors["fallback_model_name"] = f"No model named {name!r} in the registry."
