"""Who an identity provider says a user is: (issuer, subject), never the e-mail address."""
from django.conf import settings
from django.db import models


class OidcIdentity(models.Model):
    """One account at one OpenID Connect provider, linked to one Switchyard user.

    A profile keyed by (issuer, subject) rather than a custom user model: the project's user model is
    Django's, with rows and foreign keys everywhere, and switching it on a live database is not safe.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identities")
    provider = models.CharField(max_length=64, help_text="The name of the provider in SWITCHYARD_OIDC_PROVIDERS.")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    # Tenants whose membership the provider's groups granted at the last sign-in: only these are changed
    # or removed by the mapping later (a membership from an invitation is left alone).
    mapped_tenants = models.JSONField(default=list)
    last_groups = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="one_identity_per_issuer_subject")]

    def __str__(self):
        return f"{self.subject} at {self.issuer}"


class ScimAccount(models.Model):
    """A user an identity provider provisions over SCIM: only its provider's token may change or deactivate it."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="scim_account")
    provider = models.CharField(max_length=64)
    # The provider's own id of the user: the subject of its ID tokens (links the first OIDC sign-in).
    external_id = models.CharField(max_length=255, blank=True, default="")
    mapped_tenants = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)


class ScimGroup(models.Model):
    """A group an identity provider pushes over SCIM; `switchyard:<tenant>:<role>` names grant roles."""

    provider = models.CharField(max_length=64)
    display_name = models.CharField(max_length=255)
    external_id = models.CharField(max_length=255, blank=True, default="")
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="scim_groups", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["provider", "display_name"], name="one_scim_group_per_name")]
