"""Usage: raw events per request, hourly/daily rollups, GPU prices, cost, feedback and budget state."""
from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models

from usage.fields import HistogramField


class Outcome(models.TextChoices):
    OK = "ok", "Completed"
    CLIENT_ERROR = "client_error", "Rejected (4xx)"
    RATE_LIMITED = "rate_limited", "Rate or budget limited"
    UPSTREAM_ERROR = "upstream_error", "Engine error (5xx)"
    TIMEOUT = "timeout", "Timed out"
    CANCELLED = "cancelled", "Client disconnected"
    SUPERSEDED = "superseded", "Superseded by the session's newer request"


class UsageEvent(models.Model):
    """What one request used. `request_id` is unique, so a re-sent batch cannot double-count."""

    request_id = models.CharField(max_length=64, unique=True)
    # Indexed below with ttft_ms (no index of its own): every index slows ingest.
    occurred_at = models.DateTimeField(help_text="When the request finished.")
    # No index of its own: (tenant, occurred_at) below serves tenant lookups, and every index slows ingest.
    tenant = models.ForeignKey("tenants.Tenant", null=True, on_delete=models.SET_NULL, related_name="+",
                               db_index=False)
    api_key_prefix = models.CharField(max_length=32, blank=True)
    user_id = models.BigIntegerField(null=True, blank=True)
    model_name = models.CharField(max_length=200, blank=True)
    model_version_id = models.BigIntegerField(null=True, blank=True)
    instance_id = models.BigIntegerField(null=True, blank=True)
    endpoint = models.CharField(max_length=20, blank=True, help_text="completions or chat")
    status_code = models.PositiveSmallIntegerField()
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cached_tokens = models.PositiveIntegerField(default=0)
    ttft_ms = models.FloatField(null=True, blank=True)
    latency_ms = models.FloatField(default=0)
    redactions = models.PositiveIntegerField(default=0)
    cache_hit = models.BooleanField(default=False)
    fallback_used = models.BooleanField(default=False)
    streamed = models.BooleanField(default=False)
    # db_default too: the usage seeder and the gateway's executemany insert name columns explicitly.
    redacted_prompt = models.TextField(
        blank=True, default="", db_default="",
        help_text="The prompt's start after secret redaction, for the slow-requests page; cleared after "
                  "SWITCHYARD_PROMPT_SAMPLE_RETENTION_HOURS.")
    wake_wait_ms = models.FloatField(null=True, blank=True,
                                     help_text="How long the request waited for its deployment to wake from zero.")
    retried_instance_id = models.BigIntegerField(
        null=True, blank=True, help_text="The engine that failed before the first byte when the request was retried "
                                         "on another (a rollout's gates count it against that engine's version).")

    class Meta:
        indexes = [
            # Time ranges: rollups, retention, budgets. ttft_ms rides along so the slow-requests list
            # ("slower than p95 in this range") is filtered inside the index, not row by row in the table.
            models.Index(fields=["occurred_at", "ttft_ms"], name="usage_event_time_ttft"),
            # The same for one tenant's (or a few tenants') events.
            models.Index(fields=["tenant", "occurred_at", "ttft_ms"], name="usage_event_tenant_time_ttft"),
            # A rollout's gates: one version's requests over the last minutes (rollouts.selectors.figures).
            models.Index(fields=["model_version_id", "occurred_at"], name="usage_event_version_time"),
        ]

    def __str__(self):
        return f"{self.request_id} {self.outcome}"


class Granularity(models.TextChoices):
    HOUR = "hour", "Hour"
    DAY = "day", "Day"


class RollupRun(models.Model):
    """One computed period: locked while it is recomputed; `stale` asks for a recompute (late data)."""

    granularity = models.CharField(max_length=4, choices=Granularity.choices)
    period_start = models.DateTimeField()
    computed_at = models.DateTimeField(null=True, blank=True)
    stale = models.BooleanField(default=False)
    events = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["granularity", "period_start"], name="one_run_per_period")]
        indexes = [models.Index(fields=["stale", "granularity", "period_start"])]


class UsageRollup(models.Model):
    """Usage of one tenant × model version × key prefix in one hour or day (tenant empty = unknown)."""

    granularity = models.CharField(max_length=4, choices=Granularity.choices)
    period_start = models.DateTimeField()
    tenant = models.ForeignKey("tenants.Tenant", null=True, on_delete=models.CASCADE, related_name="+")
    model_version_id = models.BigIntegerField(null=True, blank=True)
    quantization = models.CharField(max_length=8, blank=True, default="")
    api_key_prefix = models.CharField(max_length=32, blank=True, default="")
    requests = models.PositiveBigIntegerField(default=0)
    ok = models.PositiveBigIntegerField(default=0)
    client_error = models.PositiveBigIntegerField(default=0)
    rate_limited = models.PositiveBigIntegerField(default=0)
    upstream_error = models.PositiveBigIntegerField(default=0)
    timeout = models.PositiveBigIntegerField(default=0)
    cancelled = models.PositiveBigIntegerField(default=0)
    superseded = models.PositiveBigIntegerField(default=0, help_text="Cancelled by the editor session's newer "
                                                                     "request (docs/supersession.md).")
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cached_tokens = models.PositiveBigIntegerField(default=0)
    engine_work = models.FloatField(default=0, help_text="w_prefill × uncached prompt + w_decode × completion.")
    ttft_count = models.PositiveBigIntegerField(default=0)
    ttft_sum_ms = models.FloatField(default=0)
    latency_sum_ms = models.FloatField(default=0)
    ttft_histogram = HistogramField(default=list, help_text="Counts per bucket of usage.histograms.BOUNDS_MS.")
    latency_histogram = HistogramField(default=list)
    fallbacks = models.PositiveBigIntegerField(default=0)
    cache_hits = models.PositiveBigIntegerField(default=0)
    feedback_accepted = models.PositiveBigIntegerField(default=0)
    feedback_ignored = models.PositiveBigIntegerField(default=0)

    class Meta:
        indexes = [
            # Replacing a period, and platform-wide charts: granularity + time range.
            models.Index(fields=["granularity", "period_start"]),
            # Tenant-scoped charts and breakdowns (the common case).
            models.Index(fields=["tenant", "granularity", "period_start"]),
        ]


class CostKind(models.TextChoices):
    USAGE = "usage", "Engine time serving requests"
    IDLE = "idle", "Idle capacity"
    WARM = "warm", "Warm pool (idle, ready to take traffic)"


class PriceUnit(models.TextChoices):
    GPU = "gpu", "per GPU-hour"
    CPU_CORE = "cpu_core", "per CPU core-hour"


class CostRollup(models.Model):
    """Cost of GPU (or CPU) time in one hour or day, allocated to a tenant (empty = unallocated)."""

    granularity = models.CharField(max_length=4, choices=Granularity.choices)
    period_start = models.DateTimeField()
    tenant = models.ForeignKey("tenants.Tenant", null=True, on_delete=models.CASCADE, related_name="+")
    model_version_id = models.BigIntegerField(null=True, blank=True)
    quantization = models.CharField(max_length=8, blank=True, default="")
    deployment_id = models.BigIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=8, choices=CostKind.choices)
    gpu_seconds = models.DecimalField(max_digits=20, decimal_places=6, default=Decimal(0),
                                      help_text="Accelerator-seconds (CPU core-seconds for CPU instances: see unit).")
    # What the instance held, so GPU-hours and CPU core-hours are never added up into one figure.
    unit = models.CharField(max_length=8, choices=PriceUnit.choices, default=PriceUnit.GPU,
                            help_text="gpu: gpu_seconds are GPU-seconds; cpu_core: CPU core-seconds.")
    cost_usd = models.DecimalField(max_digits=18, decimal_places=6, default=Decimal(0))
    engine_work = models.FloatField(default=0)

    class Meta:
        indexes = [
            models.Index(fields=["granularity", "period_start"]),
            models.Index(fields=["tenant", "granularity", "period_start"]),
        ]


class GpuPrice(models.Model):
    """Hourly price of one GPU type from `effective_from` on; history is kept so recomputes stay exact."""

    gpu_type = models.CharField(max_length=64)
    unit = models.CharField(max_length=8, choices=PriceUnit.choices, default=PriceUnit.GPU)
    hourly_usd = models.DecimalField(max_digits=10, decimal_places=4, validators=[MinValueValidator(Decimal(0))])
    effective_from = models.DateTimeField()
    note = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["gpu_type", "-effective_from"]
        constraints = [models.UniqueConstraint(fields=["gpu_type", "effective_from"],
                                               name="one_price_per_gpu_and_time")]

    def __str__(self):
        return f"{self.gpu_type} ${self.hourly_usd}/h from {self.effective_from:%Y-%m-%d}"


class CompletionFeedback(models.Model):
    """Whether the user kept a completion (accepted) or dismissed it (ignored). Last answer wins."""

    request_id = models.CharField(max_length=64, unique=True)
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    accepted = models.BooleanField()
    recorded_at = models.DateTimeField(db_index=True)

    def __str__(self):
        return f"{self.request_id} {'accepted' if self.accepted else 'ignored'}"


class BudgetState(models.Model):
    """Whether a tenant has used up a monthly budget; the gateway refuses its requests with 429."""

    tenant = models.OneToOneField("tenants.Tenant", on_delete=models.CASCADE, related_name="budget_state")
    over_budget = models.BooleanField(default=False)
    reason = models.CharField(max_length=300, blank=True, default="")
    since = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    tokens_month_to_date = models.PositiveBigIntegerField(default=0)
    cost_month_to_date_usd = models.DecimalField(max_digits=18, decimal_places=6, default=Decimal(0))

    def __str__(self):
        return f"{self.tenant} {'over budget' if self.over_budget else 'within budget'}"
