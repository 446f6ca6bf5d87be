"""Tenants and their members."""
from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from tenants.roles import Perm, Role

slug_validator = RegexValidator(
    r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$",
    "Use 1-63 lowercase letters, digits and hyphens, starting and ending with a letter or digit.")


class TenantStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    SUSPENDED = "suspended", "Suspended"


class Isolation(models.TextChoices):
    DEDICATED = "dedicated", "Dedicated capacity"
    SHARED = "shared", "Shared pools"


class RedactionMode(models.TextChoices):
    OFF = "off", "Off: prompts are sent as they are"
    REDACT = "redact", "Redact: secrets are replaced with placeholders"
    BLOCK = "block", "Block: requests holding a secret are refused"


class Tenant(models.Model):
    """A team, business unit or customer with its own keys, quotas and capacity."""

    slug = models.SlugField(max_length=63, unique=True, validators=[slug_validator])
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=16, choices=TenantStatus.choices, default=TenantStatus.ACTIVE)
    region = models.CharField(max_length=64, blank=True, default="local")
    isolation = models.CharField(max_length=16, choices=Isolation.choices, default=Isolation.SHARED)
    redaction_mode = models.CharField(max_length=8, choices=RedactionMode.choices, default=RedactionMode.REDACT,
                                      help_text="What the gateway does with secrets found in prompts.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        # Object-level grants (django-guardian) for what a member's role does not cover.
        permissions = [(perm.value, perm.label) for perm in Perm]

    def __str__(self):
        return self.slug

    @property
    def is_active(self) -> bool:
        return self.status == TenantStatus.ACTIVE


class Membership(models.Model):
    """A user's role in one tenant."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant", "user_id"]
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="one_membership_per_user_and_tenant")]

    def __str__(self):
        return f"{self.user} in {self.tenant} as {self.role}"
