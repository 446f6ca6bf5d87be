"""Reads of quota settings that other apps need (writes stay in quotas.services)."""
from dataclasses import dataclass

from django.conf import settings

from quotas.models import QuotaPolicy


@dataclass(frozen=True)
class CapacityQuota:
    """How many instances and GPUs a tenant's deployments may hold together, and where each limit comes from."""

    max_instances: int
    instances_source: str
    max_gpus: int
    gpus_source: str


def capacity_quota(tenant) -> CapacityQuota:
    """The tenant policy's capacity quota, or the platform defaults where it sets none."""
    policy = QuotaPolicy.objects.filter(tenant=tenant, api_key__isnull=True, user__isnull=True).first()
    instances, gpus = getattr(policy, "max_instances", None), getattr(policy, "max_gpus", None)
    return CapacityQuota(
        max_instances=settings.SWITCHYARD_FLEET_MAX_INSTANCES_PER_TENANT if instances is None else instances,
        instances_source="the platform limit SWITCHYARD_FLEET_MAX_INSTANCES_PER_TENANT" if instances is None
        else "its quota policy's max_instances",
        max_gpus=settings.SWITCHYARD_FLEET_MAX_GPUS_PER_TENANT if gpus is None else gpus,
        gpus_source="the platform limit SWITCHYARD_FLEET_MAX_GPUS_PER_TENANT" if gpus is None
        else "its quota policy's max_gpus")
