"""Deployments say what should run; instances record what does run."""
from django.db import models

from fleet.runtime import backend_choices
from fleet.states import InstanceState

MAX_REPLICAS = 64
MAX_PARALLEL_PRODUCT = 64


class BuiltinRuntime(models.TextChoices):
    """Names of the runtime backends Switchyard ships; the configured ones (any name) are the field's choices."""

    LOCAL = "local", "Local vLLM processes"
    SIMULATOR = "simulator", "Simulated engine"


class DeploymentStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    DELETING = "deleting", "Deleting"


class Deployment(models.Model):
    """Desired state: a model version served by N replicas on one runtime backend."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.PROTECT, null=True, blank=True,
                               related_name="deployments", help_text="Empty for a shared pool.")
    name = models.SlugField(max_length=63)
    model_version = models.ForeignKey("models_registry.ModelVersion", on_delete=models.PROTECT,
                                      related_name="deployments")
    runtime_backend = models.CharField(max_length=16, choices=backend_choices, default=BuiltinRuntime.LOCAL)
    min_replicas = models.PositiveIntegerField(default=1)
    max_replicas = models.PositiveIntegerField(default=1)
    warm_pool_size = models.PositiveIntegerField(default=0)
    tensor_parallel_size = models.PositiveIntegerField(default=1)
    pipeline_parallel_size = models.PositiveIntegerField(default=1)
    gpu_type = models.CharField(max_length=64, blank=True, default="")
    region = models.CharField(max_length=64, blank=True, default="local")
    status = models.CharField(max_length=16, choices=DeploymentStatus.choices, default=DeploymentStatus.ACTIVE)
    simulator_params = models.JSONField(default=dict, blank=True)
    fallback_model_name = models.CharField(
        max_length=200, blank=True, default="",
        help_text="A model the gateway sends requests to while this pool is saturated or slow to answer.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="one_deployment_name_per_tenant"),
            models.UniqueConstraint(fields=["name"], condition=models.Q(tenant__isnull=True),
                                    name="one_shared_pool_name"),
            models.CheckConstraint(condition=models.Q(max_replicas__gte=models.F("min_replicas")),
                                   name="max_replicas_at_least_min"),
        ]

    def __str__(self):
        return f"{self.tenant.slug if self.tenant_id else 'shared'}/{self.name}"

    @property
    def is_shared(self) -> bool:
        return self.tenant_id is None

    @property
    def target_replicas(self) -> int:
        """Instances to keep running: min plus the warm pool, never above max (autoscaling comes later)."""
        if self.status == DeploymentStatus.DELETING:
            return 0
        return min(self.min_replicas + self.warm_pool_size, self.max_replicas)


class Install(models.Model):
    """This install's identity: one row per database, made at migrate (a new database is a new install)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    install_id = models.CharField(max_length=32, unique=True, help_text="Names this install's engines and keys.")
    engine_token = models.CharField(max_length=64, help_text="Every engine carries it; only tagged engines are ours.")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"install {self.install_id}"


class Instance(models.Model):
    """Observed state: one engine process (or pod) serving a deployment."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="instances")
    state = models.CharField(max_length=16, choices=InstanceState.choices, default=InstanceState.PENDING)
    endpoint_url = models.CharField(max_length=300, blank=True, default="")
    port = models.PositiveIntegerField(null=True, blank=True)
    runtime_handle = models.JSONField(default=dict, blank=True, help_text="pid/pgid for local processes.")
    replaces = models.OneToOneField("self", on_delete=models.SET_NULL, null=True, blank=True,
                                    related_name="replacement")
    restart_count = models.PositiveIntegerField(default=0)
    next_start_after = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    starting_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    draining_at = models.DateTimeField(null=True, blank=True)
    drain_deadline = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True, help_text="When the process was reaped.")
    consecutive_health_failures = models.PositiveIntegerField(default=0)
    last_health_at = models.DateTimeField(null=True, blank=True)
    last_health_ok = models.BooleanField(null=True)
    last_health_error = models.CharField(max_length=500, blank=True, default="")
    metrics = models.JSONField(default=dict, blank=True)
    failure_reason = models.CharField(max_length=500, blank=True, default="")
    pending_reason = models.CharField(max_length=300, blank=True, default="",
                                      help_text="Why a pending instance has not started yet (e.g. host capacity).")
    launch_claim = models.CharField(max_length=32, blank=True, default="",
                                    help_text="The worker launching this pending instance (no row lock is held meanwhile).")
    launch_claimed_at = models.DateTimeField(null=True, blank=True)
    log_tail = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["deployment", "pk"]
        indexes = [models.Index(fields=["state"])]

    def __str__(self):
        return f"{self.deployment}#{self.pk} ({self.state})"

    @property
    def name(self) -> str:
        return f"instance-{self.pk}"


class Lease(models.Model):
    """A named, expiring lock held across workers and hosts: one periodic pass of a kind runs at a time."""

    name = models.CharField(max_length=64, primary_key=True)
    holder = models.CharField(max_length=32, blank=True, default="")
    expires_at = models.DateTimeField()

    def __str__(self):
        return f"lease {self.name} until {self.expires_at:%H:%M:%S}"
