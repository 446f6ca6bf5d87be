"""API key scopes and the tenant permissions each one unlocks on the admin API."""
from django.db import models

from tenants.roles import Perm


class Scope(models.TextChoices):
    INFERENCE = "inference", "Call the /v1 gateway"
    ADMIN = "admin", "Use the admin REST API"
    AUDIT_READ = "audit:read", "Read and export the audit trail"


SCOPE_PERMISSIONS: dict[str, frozenset[str]] = {
    Scope.INFERENCE: frozenset(),
    Scope.ADMIN: frozenset(Perm.values),
    Scope.AUDIT_READ: frozenset({Perm.VIEW_TENANT, Perm.VIEW_AUDIT, Perm.EXPORT_AUDIT}),
}

# Scopes that let a key use the admin REST API at all.
ADMIN_API_SCOPES = frozenset({Scope.ADMIN, Scope.AUDIT_READ})


def permissions_for_scopes(scopes) -> frozenset[str]:
    perms: frozenset[str] = frozenset()
    for scope in scopes:
        perms |= SCOPE_PERMISSIONS.get(scope, frozenset())
    return perms
