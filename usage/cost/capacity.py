"""Instances that were up during a period, read from the fleet app (absent fleet: nothing was up)."""
from dataclasses import dataclass
from datetime import datetime

from django.apps import apps
from django.db.models import Q

from usage.cost.prices import held_resources, unit_of


@dataclass(frozen=True)
class InstanceSpan:
    """When one instance held its GPUs: from starting (or ready) to stopped, failed, or still up."""

    instance_id: int
    deployment_id: int
    owner_tenant_id: int | None
    model_version_id: int
    quantization: str
    resource: str
    units: int
    unit: str  # PriceUnit: GPUs or CPU cores
    up_from: datetime
    up_to: datetime | None  # None: still up


def instance_spans(start: datetime, end: datetime) -> list[InstanceSpan]:
    """Every instance whose up time overlaps [start, end)."""
    if not apps.is_installed("fleet"):
        return []
    instance_model = apps.get_model("fleet", "Instance")
    began = Q(starting_at__lt=end) | Q(starting_at__isnull=True, ready_at__lt=end)
    ended_before = Q(stopped_at__lte=start) | Q(failed_at__lte=start)
    rows = (instance_model.objects.filter(began).exclude(ended_before)
            .select_related("deployment__model_version", "model_version"))
    return [_span(row) for row in rows]


def _span(instance) -> InstanceSpan:
    deployment = instance.deployment
    resource, units = held_resources(deployment)
    ends = [moment for moment in (instance.stopped_at, instance.failed_at) if moment is not None]
    return InstanceSpan(instance_id=instance.pk, deployment_id=deployment.pk, owner_tenant_id=deployment.tenant_id,
                        model_version_id=instance.version_id,  # its own: two run side by side in a rollout
                        quantization=instance.version.quantization, resource=resource, units=units,
                        unit=unit_of(resource),
                        up_from=instance.starting_at or instance.ready_at, up_to=min(ends) if ends else None)
