"""Who may see and change deployments — one rule for the REST API and the console (docs/roles.md)."""
from tenants.access import Principal, has_perm, may_read_field, tenant_scope
from tenants.roles import FIELD_RULES, READ_RULES, Perm, Resource


def readable_deployments(principal: Principal):
    """Deployments of tenants where the principal may read the fleet; shared pools for platform admins only."""
    from fleet.models import Deployment

    return Deployment.objects.filter(tenant_scope(principal, *READ_RULES[Resource.DEPLOYMENTS]))


def can_manage_deployments(principal: Principal, tenant) -> bool:
    """Platform admins manage every deployment (shared pools too); holders of MANAGE_FLEET their tenant's.

    A permission, not a rank: a key's scopes narrow it (an owner's `audit:read` key manages nothing).
    """
    if principal.is_platform_admin:
        return True
    return tenant is not None and has_perm(principal, tenant, Perm.MANAGE_FLEET)


def may_see_internals(principal: Principal, tenant) -> bool:
    """Engine log tails, failure details, endpoints and pids (tenants.roles.INSTANCE_INTERNALS)."""
    return may_read_field(principal, tenant, FIELD_RULES["instance"][1])
