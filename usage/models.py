"""Raw usage: one event per gateway request (rollups and cost come with the usage issue)."""
from django.db import models


class Outcome(models.TextChoices):
    OK = "ok", "Completed"
    CLIENT_ERROR = "client_error", "Rejected (4xx)"
    RATE_LIMITED = "rate_limited", "Rate or budget limited"
    UPSTREAM_ERROR = "upstream_error", "Engine error (5xx)"
    TIMEOUT = "timeout", "Timed out"
    CANCELLED = "cancelled", "Client disconnected"


class UsageEvent(models.Model):
    """What one request used. `request_id` is unique, so a re-sent batch cannot double-count."""

    request_id = models.CharField(max_length=64, unique=True)
    occurred_at = models.DateTimeField(db_index=True)
    tenant = models.ForeignKey("tenants.Tenant", null=True, on_delete=models.SET_NULL, related_name="+")
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

    class Meta:
        indexes = [models.Index(fields=["tenant", "occurred_at"])]

    def __str__(self):
        return f"{self.request_id} {self.outcome}"
