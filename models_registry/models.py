"""The model registry: models and their immutable versions."""
from django.db import models


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
    status = models.CharField(max_length=16, choices=VersionStatus.choices, default=VersionStatus.DRAFT)
    created_at = models.DateTimeField(auto_now_add=True)
    published_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["model", "-created_at"]
        constraints = [models.UniqueConstraint(fields=["model", "version"], name="one_version_label_per_model")]

    def __str__(self):
        return f"{self.model.name}@{self.version}"
