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
    cancel_superseded = models.BooleanField(
        default=True, help_text="An editor session's newer interactive completion cancels its older one still "
                                "running (docs/supersession.md).")
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


class InvitationStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    ACCEPTED = "accepted", "Accepted"
    DECLINED = "declined", "Declined"
    REVOKED = "revoked", "Revoked"


class Invitation(models.Model):
    """A role offered to an e-mail address in one tenant, until the account with that address accepts it.

    Adding a member creates one of these and never looks an account up, so the answer is the same
    whether or not someone outside the tenant already has the address (docs/roles.md).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField(help_text="Stored lower-cased; matched against the accepting account's e-mail.")
    role = models.CharField(max_length=16, choices=Role.choices)
    # For an account created on acceptance (a later sign-up or SSO flow); never compared with existing accounts.
    username = models.CharField(max_length=150, blank=True, default="")
    status = models.CharField(max_length=16, choices=InvitationStatus.choices, default=InvitationStatus.PENDING)
    invited_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    accepted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                    related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    expires_at = models.DateTimeField()
    # SHA-256 of the one-time link's token (tenants.invitation_links); the token itself is only e-mailed.
    # Renewing the invitation replaces it, so an older link stops working.
    token_hash = models.CharField(max_length=64, null=True, blank=True, unique=True, editable=False)

    class Meta:
        ordering = ["tenant", "-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["tenant", "email"], condition=models.Q(status="pending"),
                                               name="one_pending_invitation_per_tenant_and_email")]
        indexes = [models.Index(fields=["email", "status"], name="invitation_email_status")]

    def __str__(self):
        return f"{self.email} to {self.tenant} as {self.role} ({self.status})"

    def is_open(self, now) -> bool:
        return self.status == InvitationStatus.PENDING and self.expires_at > now
