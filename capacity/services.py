"""Writes of the capacity app: the GPU type table (platform-wide), each with its audit event."""
from django.core.exceptions import ValidationError
from django.db import transaction

from audit.actor import Actor
from audit.services import record_event
from capacity.models import GpuType

EDITABLE = ("name", "memory_mib", "note")


def gpu_type_view(gpu_type: GpuType) -> dict:
    return {"name": gpu_type.name, "memory_mib": gpu_type.memory_mib, "note": gpu_type.note}


def _check(gpu_type: GpuType) -> None:
    gpu_type.name = (gpu_type.name or "").strip()
    gpu_type.full_clean(validate_unique=False, validate_constraints=False)
    if GpuType.objects.filter(name__iexact=gpu_type.name).exclude(pk=gpu_type.pk).exists():
        raise ValidationError({"name": f"A GPU type named {gpu_type.name} exists already (names ignore case)."})


@transaction.atomic
def create_gpu_type(*, name: str, memory_mib: int, note: str = "", actor: Actor) -> GpuType:
    """Add a GPU type the planner can size for."""
    gpu_type = GpuType(name=name, memory_mib=memory_mib, note=note)
    _check(gpu_type)
    gpu_type.save()
    record_event(actor=actor, action="capacity.gpu_type.create", target=gpu_type, after=gpu_type_view(gpu_type))
    return gpu_type


@transaction.atomic
def update_gpu_type(gpu_type: GpuType, /, *, actor: Actor, **changes) -> GpuType:
    """Change a GPU type's name, memory or note."""
    unknown = set(changes) - set(EDITABLE)
    if unknown:
        raise ValidationError({name: "This field cannot be changed." for name in sorted(unknown)})
    gpu_type = GpuType.objects.select_for_update().get(pk=gpu_type.pk)
    before = gpu_type_view(gpu_type)
    for name, value in changes.items():
        setattr(gpu_type, name, value)
    _check(gpu_type)
    gpu_type.save()
    record_event(actor=actor, action="capacity.gpu_type.update", target=gpu_type, before=before,
                 after=gpu_type_view(gpu_type))
    return gpu_type


@transaction.atomic
def delete_gpu_type(gpu_type: GpuType, *, actor: Actor) -> None:
    """Remove a GPU type (its prices stay in the usage app's history)."""
    before = gpu_type_view(gpu_type)
    record_event(actor=actor, action="capacity.gpu_type.delete", target=gpu_type, before=before)
    gpu_type.delete()
