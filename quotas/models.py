"""Quota policies: limits for a whole tenant, or narrowed to one API key or one user."""
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$"
model_name_validator = RegexValidator(MODEL_NAME_PATTERN, "Not a valid model name.")

# Upper bounds that catch typos (an extra zero or three) without limiting real fleets.
LIMIT_BOUNDS = {
    "requests_per_minute": 1_000_000,
    "tokens_per_minute": 10_000_000_000,
    "max_concurrent_requests": 100_000,
    "monthly_token_budget": 10**13,
}
MAX_MONTHLY_BUDGET_USD = Decimal("1000000000")
MAX_ALLOWED_MODELS = 200
# Capacity (fleet) quotas: tenant-wide only, set by platform admins; empty falls back to the platform setting.
CAPACITY_FIELDS = ("max_instances", "max_gpus")
MAX_CAPACITY = 100_000


def _limit_field(name: str, help_text: str):
    return models.PositiveBigIntegerField(
        null=True, blank=True, help_text=help_text + " Empty means no limit at this level.",
        validators=[MinValueValidator(0), MaxValueValidator(LIMIT_BOUNDS[name])])


class QuotaSubject(models.TextChoices):
    TENANT = "tenant", "Whole tenant"
    API_KEY = "api_key", "One API key"
    USER = "user", "One user"


class QuotaPolicy(models.Model):
    """Limits at one level. Every applicable level is enforced independently (see docs/quotas.md)."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="quota_policies")
    api_key = models.ForeignKey("apikeys.ApiKey", null=True, blank=True, on_delete=models.CASCADE,
                                related_name="quota_policies")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="+")
    requests_per_minute = _limit_field("requests_per_minute", "Requests per minute.")
    tokens_per_minute = _limit_field("tokens_per_minute", "Prompt + completion tokens per minute.")
    max_concurrent_requests = _limit_field("max_concurrent_requests", "Requests in flight at once.")
    monthly_token_budget = _limit_field("monthly_token_budget", "Tokens per calendar month (UTC).")
    monthly_budget_usd = models.DecimalField(
        max_digits=14, decimal_places=2, null=True, blank=True,
        validators=[MinValueValidator(Decimal("0")), MaxValueValidator(MAX_MONTHLY_BUDGET_USD)],
        help_text="Money per calendar month (UTC), in US dollars. Empty means no limit at this level.")
    allowed_models = models.JSONField(
        null=True, blank=True, help_text="Model names this level may use; empty means every model.")
    max_instances = models.PositiveIntegerField(
        null=True, blank=True, validators=[MaxValueValidator(MAX_CAPACITY)],
        help_text="Engine instances the tenant's deployments may run together (sum of max_replicas). "
                  "Tenant-wide only; set by platform admins. Empty means the platform default.")
    max_gpus = models.PositiveIntegerField(
        null=True, blank=True, validators=[MaxValueValidator(MAX_CAPACITY)],
        help_text="GPUs the tenant's deployments may hold together (max_replicas × tensor × pipeline parallel "
                  "of GPU deployments). Tenant-wide only; set by platform admins. Empty means the platform default.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(api_key__isnull=True) | Q(user__isnull=True),
                name="quota_narrowed_to_key_or_user_not_both"),
            models.UniqueConstraint(
                fields=["tenant"], condition=Q(api_key__isnull=True, user__isnull=True), name="one_tenant_quota"),
            models.UniqueConstraint(fields=["api_key"], name="one_quota_per_key"),
            models.UniqueConstraint(fields=["tenant", "user"], name="one_quota_per_user"),
        ]

    def __str__(self):
        return f"{self.tenant} quota ({self.subject})"

    @property
    def subject(self) -> str:
        if self.api_key_id:
            return QuotaSubject.API_KEY
        if self.user_id:
            return QuotaSubject.USER
        return QuotaSubject.TENANT

    def audit_view(self) -> dict:
        fields = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests",
                  "monthly_token_budget", "monthly_budget_usd", "allowed_models", *CAPACITY_FIELDS)
        view = {name: getattr(self, name) for name in fields}
        view.update(subject=self.subject, api_key=getattr(self.api_key, "prefix", None),
                    user=self.user.get_username() if self.user is not None else None)
        return view
