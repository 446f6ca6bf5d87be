"""Roles and what they allow: the single role → permission table (mirrored in docs/roles.md)."""
from django.db import models


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    DEVELOPER = "developer", "Developer"
    AUDITOR = "auditor", "Auditor"
    VIEWER = "viewer", "Viewer"


class Perm(models.TextChoices):
    """Tenant-level permissions. Values double as guardian codenames on Tenant."""

    VIEW_TENANT = "view_tenant_profile", "View the tenant"
    UPDATE_TENANT = "update_tenant_profile", "Update the tenant's name and labels"
    VIEW_MEMBERS = "view_members", "List members"
    MANAGE_MEMBERS = "manage_members", "Add, change and remove members"
    VIEW_KEYS = "view_keys", "List every API key of the tenant (metadata only)"
    MANAGE_KEYS = "manage_keys", "Create, revoke and rotate any API key of the tenant"
    MANAGE_OWN_KEYS = "manage_own_keys", "Create, revoke and rotate one's own inference keys"
    VIEW_QUOTAS = "view_quotas", "Read quota policies"
    MANAGE_QUOTAS = "manage_quotas", "Create, change and delete quota policies"
    VIEW_AUDIT = "view_audit", "Read the tenant's audit events"
    EXPORT_AUDIT = "export_audit", "Export the tenant's audit trail"


# Highest first: a member may only grant roles at or below their own rank.
ROLE_RANK = {Role.OWNER: 5, Role.ADMIN: 4, Role.DEVELOPER: 3, Role.AUDITOR: 2, Role.VIEWER: 1}

ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    Role.OWNER: frozenset(Perm.values),
    Role.ADMIN: frozenset(Perm.values),
    Role.DEVELOPER: frozenset({
        Perm.VIEW_TENANT, Perm.VIEW_MEMBERS, Perm.MANAGE_OWN_KEYS, Perm.VIEW_QUOTAS,
    }),
    Role.AUDITOR: frozenset({Perm.VIEW_TENANT, Perm.VIEW_AUDIT, Perm.EXPORT_AUDIT}),
    Role.VIEWER: frozenset({Perm.VIEW_TENANT, Perm.VIEW_MEMBERS, Perm.VIEW_KEYS, Perm.VIEW_QUOTAS}),
}


def outranks_or_equals(granter_role: str, granted_role: str) -> bool:
    """True when a member with `granter_role` may hand out `granted_role`."""
    return ROLE_RANK[Role(granter_role)] >= ROLE_RANK[Role(granted_role)]
