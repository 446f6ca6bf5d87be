"""The model registry: models and their immutable versions."""
from django.core.exceptions import ValidationError
from django.db import models

# Everything but the lifecycle status: frozen once a version leaves draft. Migration 0002's
# database trigger enforces the same rule for writes that bypass save() (update(), raw SQL).
FROZEN_FIELDS = ("model_id", "version", "artifact_uri", "checksum", "quantization", "dtype", "max_context",
                 "engine_args", "fim_template", "created_at", "published_at")


class ModelFamily(models.TextChoices):
    DEEPSEEK_CODER = "deepseek-coder", "DeepSeek-Coder"
    QWEN_CODER = "qwen-coder", "Qwen-Coder"
    CODELLAMA = "codellama", "CodeLlama"
    STARCODER2 = "starcoder2", "StarCoder2"
    LLAMA = "llama", "Llama"
    OTHER = "other", "Other"


class Quantization(models.TextChoices):
    NONE = "none", "None"
    AWQ = "awq", "AWQ"
    GPTQ = "gptq", "GPTQ"
    FP8 = "fp8", "FP8"


class VersionStatus(models.TextChoices):
    DRAFT = "draft", "Draft"
    PUBLISHED = "published", "Published"
    DEPRECATED = "deprecated", "Deprecated"
    RETIRED = "retired", "Retired"


class Model(models.Model):
    """A model line (e.g. qwen2.5-coder-7b); what clients name in `model`."""

    name = models.CharField(max_length=200, unique=True)
    family = models.CharField(max_length=32, choices=ModelFamily.choices, default=ModelFamily.OTHER)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class ModelVersion(models.Model):
    """One immutable build of a model: once published, only its status may change."""

    model = models.ForeignKey(Model, on_delete=models.PROTECT, related_name="versions")
    version = models.CharField(max_length=64)
    artifact_uri = models.CharField(max_length=1000)
    checksum = models.CharField(max_length=200, blank=True, help_text="Weights checksum or manifest digest.")
    quantization = models.CharField(max_length=8, choices=Quantization.choices, default=Quantization.NONE)
    dtype = models.CharField(max_length=16, default="auto")
    max_context = models.PositiveIntegerField(default=4096)
    engine_args = models.JSONField(default=dict, blank=True, help_text="vLLM flags overriding the serving profile.")
    fim_template = models.CharField(
        max_length=500, blank=True, default="",
        help_text="Fill-in-the-middle template with {prefix} and {suffix}; blank: the family's (docs/fim.md).")
    status = models.CharField(max_length=16, choices=VersionStatus.choices, default=VersionStatus.DRAFT)
    created_at = models.DateTimeField(auto_now_add=True)
    published_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["model", "-created_at"]
        constraints = [models.UniqueConstraint(fields=["model", "version"], name="one_version_label_per_model")]

    def __str__(self):
        return f"{self.model.name}@{self.version}"

    @property
    def is_draft(self) -> bool:
        return self.status == VersionStatus.DRAFT

    def save(self, *args, **kwargs):
        self._refuse_changes_after_publish()
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        if self.pk is not None and not self.is_draft:
            raise ValidationError({"status": f"{self} is {self.status}: retire it instead of deleting it."})
        return super().delete(*args, **kwargs)

    def _refuse_changes_after_publish(self) -> None:
        """A published (or later) row keeps every field but its status, whoever saves it."""
        stored = ModelVersion.objects.filter(pk=self.pk).values(*FROZEN_FIELDS, "status").first() if self.pk else None
        if stored is None or stored["status"] == VersionStatus.DRAFT:
            return
        changed = [name for name in FROZEN_FIELDS if getattr(self, name) != stored[name]]
        if self.status == VersionStatus.DRAFT:
            changed.append("status")
        if changed:
            raise ValidationError({name.removesuffix("_id"): f"{stored['status'].capitalize()} versions are immutable; "
                                   "create a new version instead." for name in changed})
