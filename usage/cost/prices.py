"""Which hourly price applied to a GPU type at a given time, and what a deployment holds."""
from decimal import Decimal

from django.conf import settings

from usage.models import GpuPrice, PriceUnit

CPU = "cpu"


class PriceHistory:
    """Every price change, read once, resolved per hour in memory (for recomputing many hours)."""

    def __init__(self):
        self.changes = list(GpuPrice.objects.order_by("effective_from").values_list(
            "gpu_type", "effective_from", "hourly_usd"))

    def at(self, moment) -> dict[str, Decimal]:
        table: dict[str, Decimal] = {}
        for gpu_type, effective_from, price in self.changes:
            if effective_from > moment:
                break
            table[gpu_type.lower()] = price
        return table


def unit_of(resource: str) -> str:
    """What a held resource is counted in: GPU-hours, or CPU core-hours for the `cpu` price key."""
    return PriceUnit.CPU_CORE if resource == CPU else PriceUnit.GPU


def held_resources(deployment) -> tuple[str, int]:
    """(price key, units) one instance holds: TP × PP GPUs of its type, or CPU cores when it has no GPU."""
    gpu_type = (deployment.gpu_type or "").strip()
    if gpu_type.lower() in ("", CPU):
        cores = getattr(deployment, "cpu_cores", None) or settings.SWITCHYARD_COST_CPU_CORES_PER_INSTANCE
        return CPU, int(cores)
    return gpu_type.lower(), deployment.tensor_parallel_size * deployment.pipeline_parallel_size
