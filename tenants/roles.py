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
    VIEW_FLEET = "view_fleet", "See the tenant's deployments and instances (state, replicas, health, load)"
    VIEW_FLEET_INTERNALS = "view_fleet_internals", "See engine log tails, failure details, endpoints and process ids"
    MANAGE_FLEET = "manage_fleet", "Deploy, scale, drain, restart and delete the tenant's deployments"
    VIEW_REGISTRY = "view_registry", "Read the model registry"
    VIEW_REGISTRY_INTERNALS = "view_registry_internals", "See model versions' artifact URIs and engine arguments"
    VIEW_USAGE = "view_usage", "Read usage, cost, budget state and GPU prices"


# Highest first: a member may only grant roles at or below their own rank.
ROLE_RANK = {Role.OWNER: 5, Role.ADMIN: 4, Role.DEVELOPER: 3, Role.AUDITOR: 2, Role.VIEWER: 1}

# What every member who works with the tenant's capacity reads: its fleet (without engine internals),
# the registry it deploys from (without artifact locations) and what it used. Auditors get none of it:
# their job is the audit trail, and usage names keys and models they have no need to know.
_OPERATIONAL_READS = frozenset({Perm.VIEW_FLEET, Perm.VIEW_REGISTRY, Perm.VIEW_USAGE})

ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    Role.OWNER: frozenset(Perm.values),
    Role.ADMIN: frozenset(Perm.values),
    Role.DEVELOPER: frozenset({
        Perm.VIEW_TENANT, Perm.VIEW_MEMBERS, Perm.MANAGE_OWN_KEYS, Perm.VIEW_QUOTAS,
    }) | _OPERATIONAL_READS,
    Role.AUDITOR: frozenset({Perm.VIEW_TENANT, Perm.VIEW_AUDIT, Perm.EXPORT_AUDIT}),
    Role.VIEWER: frozenset({Perm.VIEW_TENANT, Perm.VIEW_MEMBERS, Perm.VIEW_KEYS,
                            Perm.VIEW_QUOTAS}) | _OPERATIONAL_READS,
}


class Resource(models.TextChoices):
    """What the REST API and the console show, each read under one rule (READ_RULES)."""

    TENANT = "tenant", "Tenants"
    MEMBERS = "members", "Members and invitations"
    KEYS = "keys", "API keys"
    QUOTAS = "quotas", "Quota policies and budgets"
    AUDIT = "audit", "Audit trail"
    DEPLOYMENTS = "deployments", "Deployments and instances"
    REGISTRY = "registry", "Models and versions"
    USAGE = "usage", "Usage, cost, budget state and GPU prices"


# Reading a resource needs one of these in the row's tenant (a tenant-less resource: in any tenant).
# The REST API's base viewsets (controlplane/api/viewsets.py) and the console (console/access.py) both
# read this table, so a view cannot pick its own rule. Writes need more; each endpoint says what.
READ_RULES: dict[str, tuple[str, ...]] = {
    Resource.TENANT: (Perm.VIEW_TENANT,),
    Resource.MEMBERS: (Perm.VIEW_MEMBERS, Perm.MANAGE_MEMBERS),
    Resource.KEYS: (Perm.VIEW_KEYS, Perm.MANAGE_KEYS, Perm.MANAGE_OWN_KEYS),
    Resource.QUOTAS: (Perm.VIEW_QUOTAS, Perm.MANAGE_QUOTAS),
    Resource.AUDIT: (Perm.VIEW_AUDIT,),
    Resource.DEPLOYMENTS: (Perm.VIEW_FLEET, Perm.MANAGE_FLEET),
    Resource.REGISTRY: (Perm.VIEW_REGISTRY,),
    Resource.USAGE: (Perm.VIEW_USAGE,),
}

# Fields shown only with a further permission; everyone else reads them as null (the key stays).
INSTANCE_INTERNALS = ("endpoint_url", "port", "pid", "last_health_error", "failure_reason", "log_tail")
VERSION_INTERNALS = ("artifact_uri", "engine_args", "effective_engine_args")
FIELD_RULES: dict[str, tuple[tuple[str, ...], str]] = {
    "instance": (INSTANCE_INTERNALS, Perm.VIEW_FLEET_INTERNALS),
    "model_version": (VERSION_INTERNALS, Perm.VIEW_REGISTRY_INTERNALS),
}


def outranks_or_equals(granter_role: str | None, granted_role: str) -> bool:
    """True when a member with `granter_role` (None: no role in the tenant) may hand out `granted_role`."""
    return granter_role is not None and ROLE_RANK[Role(granter_role)] >= ROLE_RANK[Role(granted_role)]
