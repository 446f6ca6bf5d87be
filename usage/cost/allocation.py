"""Pure allocation of one instance-hour's cost: busy time by engine work share, idle time by ownership.

Idle time spent warm (started, not routed: docs/autoscaling.md) is its own kind, `warm`.

No database here: inputs are plain values, so the worked examples in docs/usage-and-cost.md are unit tests.
"""
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal

from usage.models import CostKind, PriceUnit

MICRO = Decimal("0.000001")


@dataclass(frozen=True)
class InstanceHour:
    """One instance during (part of) one hour, and the engine work of the requests it served then."""

    deployment_id: int
    owner_tenant_id: int | None  # None: a shared pool
    model_version_id: int | None
    quantization: str
    gpu_seconds: Decimal
    cost_usd: Decimal
    up_seconds: float
    busy_seconds: float
    work_by_tenant: dict = field(default_factory=dict)
    unit: str = PriceUnit.GPU  # gpu_seconds are CPU core-seconds for PriceUnit.CPU_CORE
    warm_seconds: float = 0.0  # of up_seconds, spent warm (not routed): idle by design


@dataclass(frozen=True)
class CostShare:
    tenant_id: int | None
    model_version_id: int | None
    quantization: str
    deployment_id: int
    kind: str
    gpu_seconds: Decimal
    cost_usd: Decimal
    engine_work: float
    unit: str = PriceUnit.GPU


def micro(value) -> Decimal:
    return Decimal(value).quantize(MICRO, rounding=ROUND_HALF_EVEN)


def split(amount: Decimal, weights: dict) -> dict:
    """Shares of `amount` proportional to `weights`, rounded to micro-dollars, summing exactly to `amount`."""
    total = sum(weights.values())
    shares = {key: micro(amount * Decimal(weight) / Decimal(total)) for key, weight in weights.items()}
    # Rounding leaves at most a few micro-dollars over or under: the largest share absorbs them.
    largest = max(weights, key=lambda key: (weights[key], str(key)))
    shares[largest] += amount - sum(shares.values())
    return shares


def allocate(hour: InstanceHour) -> list[CostShare]:
    """Busy cost to the requests' tenants by work; idle cost to the owner, or pro rata, or unallocated."""
    total_work = sum(hour.work_by_tenant.values())
    fraction = busy_fraction(hour, total_work)
    busy_cost, busy_gpu = micro(hour.cost_usd * fraction), micro(hour.gpu_seconds * fraction)
    shares = _shares(hour, CostKind.USAGE, busy_cost, busy_gpu, hour.work_by_tenant) if fraction else []
    idle_cost, idle_gpu = hour.cost_usd - busy_cost, hour.gpu_seconds - busy_gpu
    warm = Decimal(min(hour.warm_seconds / hour.up_seconds, 1.0)) if hour.up_seconds > 0 else Decimal(0)
    warm_cost, warm_gpu = min(micro(hour.cost_usd * warm), idle_cost), min(micro(hour.gpu_seconds * warm), idle_gpu)
    if warm_cost or warm_gpu:
        shares += _shares(hour, CostKind.WARM, warm_cost, warm_gpu, idle_weights(hour, total_work))
    idle_cost, idle_gpu = idle_cost - warm_cost, idle_gpu - warm_gpu
    if idle_cost or idle_gpu:
        shares += _shares(hour, CostKind.IDLE, idle_cost, idle_gpu, idle_weights(hour, total_work))
    return shares


def busy_fraction(hour: InstanceHour, total_work: float) -> Decimal:
    """Share of the up time covered by requests; requests that did no engine work make nothing busy."""
    if total_work <= 0 or hour.up_seconds <= 0:
        return Decimal(0)
    return Decimal(min(hour.busy_seconds / hour.up_seconds, 1.0))


def idle_weights(hour: InstanceHour, total_work: float) -> dict:
    """Dedicated: all to the owner. Shared: pro rata by work. Shared and unused: the unallocated bucket."""
    if hour.owner_tenant_id is not None:
        return {hour.owner_tenant_id: 1}
    if total_work > 0:
        return {tenant: work for tenant, work in hour.work_by_tenant.items() if work > 0}
    return {None: 1}


def _shares(hour: InstanceHour, kind: str, cost: Decimal, gpu: Decimal, weights: dict) -> list[CostShare]:
    costs, gpus = split(cost, weights), split(gpu, weights)
    work = hour.work_by_tenant if kind == CostKind.USAGE else {}
    return [CostShare(tenant, hour.model_version_id, hour.quantization, hour.deployment_id, kind, gpus[tenant],
                      costs[tenant], work.get(tenant, 0.0), hour.unit) for tenant in weights]


def busy_seconds(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of [start, end) intervals, clipped to [lo, hi)."""
    total, current_start = 0.0, 0.0  # current_start is read only while current_end is set
    current_end: float | None = None
    for start, end in sorted((max(s, lo), min(e, hi)) for s, e in intervals):
        if end <= start:
            continue
        if current_end is None or start > current_end:
            total += (current_end - current_start) if current_end is not None else 0.0
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    return total + ((current_end - current_start) if current_end is not None else 0.0)
