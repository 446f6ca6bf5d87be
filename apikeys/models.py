"""API keys: only an HMAC of the key and a display prefix are stored."""
from django.conf import settings
from django.db import models
from django.utils import timezone

from tenants.roles import Role


class ApiKeyQuerySet(models.QuerySet):
    def usable(self, at=None):
        """Keys that are neither revoked nor expired at `at` (default now)."""
        at = at or timezone.now()
        return self.filter(revoked_at__isnull=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=at))


class ApiKey(models.Model):
    """A credential for the gateway and/or the admin API, bound to one tenant (or, for staff, none)."""

    tenant = models.ForeignKey("tenants.Tenant", null=True, blank=True, on_delete=models.CASCADE,
                               related_name="api_keys")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="api_keys",
        help_text="The person the key belongs to; empty for a service key.")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=32, unique=True)
    key_hash = models.CharField(max_length=64, unique=True)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.DEVELOPER)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    rotated_from = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="rotated_to")

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "created_at"])]

    def __str__(self):
        return f"{self.prefix}… ({self.name})"

    def state(self, at=None) -> str:
        at = at or timezone.now()
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= at:
            return "expired"
        return "active"

    def audit_view(self) -> dict:
        """What an audit row may show of a key: never the hash, never the secret."""
        return {
            "name": self.name, "prefix": self.prefix, "role": self.role, "scopes": list(self.scopes),
            "user": self.user.get_username() if self.user is not None else None,
            "expires_at": self.expires_at, "revoked_at": self.revoked_at,
        }
