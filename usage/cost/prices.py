"""Which hourly price applied to a GPU type at a given time, and what a deployment holds."""
from decimal import Decimal

from django.conf import settings

from usage.models import GpuPrice

CPU = "cpu"


def price_table(at) -> dict[str, Decimal]:
    """Lower-cased GPU type → hourly USD price in force at `at` (the latest change not after it)."""
    table: dict[str, Decimal] = {}
    for gpu_type, price in (GpuPrice.objects.filter(effective_from__lte=at)
                            .order_by("gpu_type", "-effective_from").values_list("gpu_type", "hourly_usd")):
        table.setdefault(gpu_type.lower(), price)
    return table


def held_resources(deployment) -> tuple[str, int]:
    """(price key, units) one instance holds: TP × PP GPUs of its type, or CPU cores when it has no GPU."""
    gpu_type = (deployment.gpu_type or "").strip()
    if gpu_type.lower() in ("", CPU):
        cores = getattr(deployment, "cpu_cores", None) or settings.SWITCHYARD_COST_CPU_CORES_PER_INSTANCE
        return CPU, int(cores)
    return gpu_type.lower(), deployment.tensor_parallel_size * deployment.pipeline_parallel_size
