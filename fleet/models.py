"""Deployments say what should run; instances record what does run."""
from django.core.validators import MaxValueValidator
from django.db import models

from fleet.autoscaling.schedule import DEFAULT_LEAD_SECONDS, MAX_LEAD_SECONDS
from fleet.runtime import backend_choices
from fleet.states import InstanceState

MAX_REPLICAS = 64
MAX_PARALLEL_PRODUCT = 64


class BuiltinRuntime(models.TextChoices):
    """Names of the runtime backends Switchyard ships; the configured ones (any name) are the field's choices."""

    LOCAL = "local", "Local vLLM processes"
    SIMULATOR = "simulator", "Simulated engine"


class RoutingPolicyName(models.TextChoices):
    """How the gateway picks one of a deployment's engines (gateway.routing.policies; the values must match)."""

    PREFIX_AFFINITY = "prefix_affinity", "Prefix affinity (same prompt prefix → same engine, bounded load)"
    LEAST_OUTSTANDING = "least_outstanding", "Least outstanding requests"
    LATENCY_EWMA = "latency_ewma", "Lowest recent time to first token"
    ROUND_ROBIN = "round_robin", "Round robin"


class InstanceRole(models.TextChoices):
    """Serving instances take traffic; warm ones are started and healthy but not routed (promoted in seconds)."""

    SERVING = "serving", "Serving"
    WARM = "warm", "Warm"


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
    serving_replicas = models.PositiveIntegerField(
        default=1, help_text="Instances taking traffic now: min_replicas, or the autoscaler's choice in [min, max].")
    tensor_parallel_size = models.PositiveIntegerField(default=1)
    pipeline_parallel_size = models.PositiveIntegerField(default=1)
    gpu_type = models.CharField(max_length=64, blank=True, default="")
    region = models.CharField(max_length=64, blank=True, default="local")
    status = models.CharField(max_length=16, choices=DeploymentStatus.choices, default=DeploymentStatus.ACTIVE)
    simulator_params = models.JSONField(default=dict, blank=True)
    routing_policy = models.CharField(
        max_length=32, choices=RoutingPolicyName.choices, default=RoutingPolicyName.PREFIX_AFFINITY,
        help_text="How the gateway picks one of this deployment's engines for a request.")
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
    def autoscaled(self) -> bool:
        policy = getattr(self, "scaling", None) if self.pk else None
        return bool(policy and policy.enabled)

    @property
    def serving_target(self) -> int:
        """Serving instances to keep: the autoscaler's size (within min and max), or min when it is off."""
        if self.status == DeploymentStatus.DELETING:
            return 0
        if not self.autoscaled:
            return self.min_replicas
        return max(self.min_replicas, min(self.serving_replicas, self.max_replicas))

    @property
    def warm_target(self) -> int:
        """Warm instances to keep beside them: the pool, within max; none while asleep at zero."""
        serving = self.serving_target
        if self.status == DeploymentStatus.DELETING or (serving == 0 and self.autoscaled):
            return 0
        return max(0, min(self.warm_pool_size, self.max_replicas - serving))

    @property
    def target_replicas(self) -> int:
        """Instances to keep running: serving plus warm."""
        return self.serving_target + self.warm_target

    def rollout_in_progress(self) -> bool:
        """A rollout of this deployment is pending, ramping or paused (the autoscaler never scales down then)."""
        from django.apps import apps

        if not apps.is_installed("rollouts"):
            return False
        from rollouts.models import ACTIVE_STATES

        return self.rollouts.filter(state__in=ACTIVE_STATES).exists()


class ScalingPolicy(models.Model):
    """How a deployment follows demand (docs/autoscaling.md); absent or disabled: it stays at min_replicas."""

    deployment = models.OneToOneField(Deployment, on_delete=models.CASCADE, related_name="scaling")
    enabled = models.BooleanField(default=True)
    queue_per_instance = models.FloatField(default=8.0, help_text="Waiting requests per serving instance → up.")
    kv_cache_usage = models.FloatField(default=0.90, help_text="KV-cache usage (0..1) that, held, scales up.")
    ttft_p95_slo_ms = models.FloatField(null=True, blank=True, help_text="Gateway p95 TTFT above this, held → up.")
    up_window_seconds = models.PositiveIntegerField(default=20)
    low_water_per_instance = models.FloatField(default=1.0, help_text="Running + waiting per instance = idle.")
    idle_window_seconds = models.PositiveIntegerField(default=300)
    zero_after_idle_seconds = models.PositiveIntegerField(default=900, help_text="With min 0: idle this long → 0.")
    cooldown_up_seconds = models.PositiveIntegerField(default=60)
    cooldown_down_seconds = models.PositiveIntegerField(default=300)
    max_step = models.PositiveIntegerField(default=2)
    wake_timeout_seconds = models.PositiveIntegerField(
        default=180, help_text="How long the gateway holds a request for a deployment at zero (then 503).")
    schedule = models.JSONField(default=list, blank=True,
                                help_text="Windows of the week with a serving floor (fleet/autoscaling/schedule.py).")
    schedule_lead_seconds = models.PositiveIntegerField(
        default=DEFAULT_LEAD_SECONDS, validators=[MaxValueValidator(MAX_LEAD_SECONDS)],
        help_text="How long before a window opens its floor applies (cover a cold start).")
    last_scale_up_at = models.DateTimeField(null=True, blank=True)
    last_scale_down_at = models.DateTimeField(null=True, blank=True)
    wake_requested_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"scaling of {self.deployment}"


class DemandSample(models.Model):
    """One look at a deployment's demand and size (every autoscale pass): what decisions and the chart read."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="demand_samples")
    at = models.DateTimeField()
    serving = models.PositiveIntegerField()
    warm = models.PositiveIntegerField(default=0)
    waiting = models.FloatField(default=0)
    running = models.FloatField(default=0)
    kv_cache_usage = models.FloatField(null=True, blank=True)
    ttft_p95_ms = models.FloatField(null=True, blank=True)
    requests = models.PositiveIntegerField(default=0)
    # Requests the gateways held in flight at its engines at that moment, and of those the streamed ones without
    # a first token yet (controlplane/demand_signal.py); null: no gateway signal (no Redis).
    held = models.FloatField(null=True, blank=True)
    gateway_waiting = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["deployment", "at"]
        indexes = [models.Index(fields=["deployment", "at"])]


class ScalingDecision(models.Model):
    """A change of a deployment's serving size and why (the figures that triggered it); also audited."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="scaling_decisions")
    decided_at = models.DateTimeField()
    rule = models.CharField(max_length=32)
    action = models.CharField(max_length=8)
    from_serving = models.PositiveIntegerField()
    to_serving = models.PositiveIntegerField()
    signals = models.JSONField(default=dict)
    reason = models.CharField(max_length=300)

    class Meta:
        ordering = ["deployment", "decided_at"]
        indexes = [models.Index(fields=["deployment", "decided_at"])]


class WarmSpan(models.Model):
    """A stretch of time an instance spent warm (started, not routed): its cost is shown as warm idle capacity."""

    instance = models.ForeignKey("Instance", on_delete=models.CASCADE, related_name="warm_spans")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True,
                                    help_text="Promoted then; empty: still warm (or until stopped).")

    class Meta:
        ordering = ["instance", "started_at"]


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
    role = models.CharField(max_length=8, choices=InstanceRole.choices, default=InstanceRole.SERVING)
    model_version = models.ForeignKey(
        "models_registry.ModelVersion", on_delete=models.PROTECT, null=True, blank=True, related_name="instances",
        help_text="The version this engine runs; empty: the deployment's (rows made before rollouts existed).")
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
                                    help_text="The worker launching this pending instance "
                                              "(no row lock is held meanwhile).")
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

    @property
    def version(self):
        """The model version this engine runs (its own, else its deployment's)."""
        return self.model_version if self.model_version_id else self.deployment.model_version

    @property
    def version_id(self) -> int:
        return self.model_version_id or self.deployment.model_version_id


class Lease(models.Model):
    """A named, expiring lock held across workers and hosts: one periodic pass of a kind runs at a time."""

    name = models.CharField(max_length=64, primary_key=True)
    holder = models.CharField(max_length=32, blank=True, default="")
    expires_at = models.DateTimeField()

    def __str__(self):
        return f"lease {self.name} until {self.expires_at:%H:%M:%S}"
