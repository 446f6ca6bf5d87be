"""Reads of the capacity app: a plan's inputs from the registry, the GPU table and usage; a deployment's live signals.

Scoping is decided by the caller (API view, console view, command) through tenants.access; these
functions take the ids it allowed.
"""
from dataclasses import dataclass
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.utils import timezone

from capacity import advice, traffic
from capacity.inputs import config_architecture, gpu_of, version_architecture
from capacity.models import GpuType
from capacity.planner import GIB, Plan, PlanInputs, Traffic, plan, seed_traffic
from fleet.models import Deployment, InstanceRole
from fleet.states import InstanceState
from models_registry.profiles import effective_engine_args

ADVICE_WINDOW = timedelta(minutes=15)


@dataclass(frozen=True)
class TrafficScope:
    """Whose usage history a derived profile reads: tenants (None: the whole install) or one deployment."""

    label: str
    tenant_ids: list[int] | None = None
    deployment: Deployment | None = None


def gpu_type_named(name: str) -> GpuType:
    found = GpuType.objects.filter(name__iexact=name.strip()).first()
    if found is None:
        known = ", ".join(GpuType.objects.values_list("name", flat=True))
        raise ValidationError({"gpu_type": f"No GPU type named {name!r}. Known: {known or 'none'}."})
    return found


def history_traffic(scope: TrafficScope, *, days: int, developers: int | None) -> Traffic:
    """The traffic profile of a scope's completed requests in the last `days`."""
    window = timedelta(days=days)
    instance_ids = list(scope.deployment.instances.values_list("pk", flat=True)) if scope.deployment else None
    events = traffic.usage_events(since=timezone.now() - window, tenant_ids=scope.tenant_ids,
                                  instance_ids=instance_ids)
    if not events:
        raise ValidationError({"traffic": f"No completed requests for {scope.label} in the last {days} days: "
                                          "plan from the seed practice (traffic=seed) instead."})
    return traffic.profile(events, window=window, developers=developers, label=scope.label)


def build_inputs(data: dict, *, scope: TrafficScope | None) -> PlanInputs:
    """PlanInputs from validated request data (the API serializer's / the command's arguments)."""
    cpu = data.get("kv_space_gib") is not None
    if data.get("model_version") is not None:
        architecture = version_architecture(data["model_version"], cpu=cpu)
    else:
        architecture = config_architecture(data["config"], name=data.get("name") or "pasted config",
                                           dtype=data.get("dtype") or ("float32" if cpu else "auto"),
                                           quantization=data.get("quantization") or "none")
    gpu = gpu_of(data["gpu_type"]) if data.get("gpu_type") is not None else None
    if data.get("traffic", "seed") == "usage":
        profile = history_traffic(scope or TrafficScope(label="the whole install"),
                                  days=data.get("history_days", 7), developers=data.get("developers"))
    else:
        profile = seed_traffic(data.get("developers") or 50, concurrency_ratio=data.get("concurrency_ratio", 0.24),
                               prompt_tokens=data.get("prompt_tokens", 1500),
                               completion_tokens=data.get("completion_tokens", 64))
    return PlanInputs(
        architecture=architecture, context_length=data["context_length"], traffic=profile, gpu=gpu,
        kv_space_bytes=int(data["kv_space_gib"] * GIB) if cpu else None,
        gpu_memory_utilization=data.get("gpu_memory_utilization", 0.90),
        reserve_bytes=int(data.get("reserve_gib", 2) * GIB), tensor_parallel_size=data.get("tensor_parallel_size", 1),
        block_size=data.get("block_size", 16), redundancy=data.get("redundancy", 1),
        max_concurrency_per_replica=data.get("max_concurrency_per_replica"))


def plan_document(inputs: PlanInputs, result: Plan) -> dict:
    """What the API, the command's --json and the console show: the inputs as understood, and the plan."""
    arch, demand = inputs.architecture, inputs.traffic
    return {
        "model": {"name": arch.name, "layers": arch.layers, "kv_heads": arch.kv_heads, "head_dim": arch.head_dim,
                  "kv_dtype_bytes": arch.kv_dtype_bytes, "parameters": arch.parameters,
                  "weight_bytes": arch.weight_bytes, "weights_source": arch.weights_source,
                  "max_position_embeddings": arch.max_positions},
        "gpu": None if inputs.gpu is None else {
            "name": inputs.gpu.name, "memory_bytes": inputs.gpu.memory_bytes,
            "hourly_usd": None if inputs.gpu.hourly_usd is None else str(inputs.gpu.hourly_usd)},
        "traffic": {"developers": demand.developers, "peak_concurrency": demand.peak_concurrency,
                    "prompt_tokens": demand.prompt_tokens, "completion_tokens": demand.completion_tokens,
                    "completions_per_month": demand.completions_per_month, "profile": demand.source},
        "settings": {"context_length": inputs.context_length, "gpu_memory_utilization": inputs.gpu_memory_utilization,
                     "reserve_bytes": inputs.reserve_bytes, "kv_space_bytes": inputs.kv_space_bytes,
                     "tensor_parallel_size": inputs.tensor_parallel_size, "block_size": inputs.block_size,
                     "redundancy": inputs.redundancy,
                     "max_concurrency_per_replica": inputs.max_concurrency_per_replica},
        "plan": result.as_dict(),
    }


def make_plan(data: dict, *, scope: TrafficScope | None = None) -> dict:
    inputs = build_inputs(data, scope=scope)
    return plan_document(inputs, plan(inputs))


def live_signals(deployment: Deployment, *, window: timedelta = ADVICE_WINDOW) -> advice.LiveSignals:
    """A deployment's demand samples of the last `window` and its ready engines' prefix-cache counters."""
    since = timezone.now() - window
    samples = [advice.Sample(at=s.at.timestamp(), serving=s.serving, waiting=s.waiting, running=s.running,
                             kv_cache_usage=s.kv_cache_usage)
               for s in deployment.demand_samples.filter(at__gte=since).order_by("at")]
    ready = deployment.instances.filter(state=InstanceState.READY, role=InstanceRole.SERVING)
    metrics = [instance.metrics or {} for instance in ready]
    return advice.LiveSignals(
        samples=samples, prefix_cache_hits=sum(m.get("prefix_cache_hits") or 0 for m in metrics),
        prefix_cache_queries=sum(m.get("prefix_cache_queries") or 0 for m in metrics),
        prefix_caching_enabled=bool(effective_engine_args(deployment.model_version).get("enable_prefix_caching")),
        routing_policy=deployment.routing_policy)


def deployment_advice(deployment: Deployment) -> dict:
    signals = live_signals(deployment)
    found = advice.advise(signals)
    hit_ratio = (signals.prefix_cache_hits / signals.prefix_cache_queries) if signals.prefix_cache_queries else None
    return {"deployment": deployment.pk, "window_seconds": int(ADVICE_WINDOW.total_seconds()),
            "samples": len(signals.samples), "prefix_cache_hit_ratio": hit_ratio,
            "advice": [item.as_dict() for item in found]}
