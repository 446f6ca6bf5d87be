"""GPU types the capacity planner sizes for: memory per device; prices live in usage's GPU price table."""
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models.functions import Lower

# The GPU price table's rule for names (usage/api/serializers.py), so a type and its price match by name.
GPU_TYPE_NAME = RegexValidator(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
                               "Letters, digits, '.', '_' and '-', starting with a letter or digit.")
MIB = 1024 * 1024


class GpuType(models.Model):
    """One accelerator model and its memory; its hourly price is usage.GpuPrice of the same name."""

    name = models.CharField(max_length=64, validators=[GPU_TYPE_NAME],
                            help_text="As deployments and the GPU price table name it, e.g. H100 (any case).")
    memory_mib = models.PositiveIntegerField(
        validators=[MinValueValidator(1024), MaxValueValidator(16 * 1024 * 1024)],
        help_text="Total device memory in MiB, as nvidia-smi reports it.")
    note = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = [Lower("name")]
        constraints = [models.UniqueConstraint(Lower("name"), name="one_gpu_type_per_name")]

    def __str__(self):
        return f"{self.name} ({self.memory_mib} MiB)"

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    def current_price(self):
        """The usage app's price in force for this type (matched case-insensitively), or None."""
        from usage.services import current_price

        return current_price(self.name)
