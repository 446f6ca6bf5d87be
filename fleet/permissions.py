"""Who may see and change deployments — one rule for the REST API and the console (docs/roles.md).

Besides the tenant-wide rule (READ_RULES, MANAGE_FLEET), a member may hold a per-object grant on one
deployment (tenants.object_grants): `view_deployment` shows that deployment alone, `change_deployment`
also lets them operate it (scale, autoscaling, routing, drain, restart) — never delete it or deploy.
"""
from django.db.models import Q

from tenants.access import Principal, has_perm, holds_anywhere, may_read_field, tenant_scope
from tenants.object_grants import CHANGE_DEPLOYMENT, DEPLOYMENT, VIEW_DEPLOYMENT, granted_ids, object_perms
from tenants.roles import FIELD_RULES, READ_RULES, Perm, Resource


def readable_deployments(principal: Principal):
    """Deployments of tenants where the principal may read the fleet, plus those granted to them one by one;
    shared pools for platform admins only."""
    from fleet.models import Deployment

    granted = granted_ids(principal, DEPLOYMENT, VIEW_DEPLOYMENT, CHANGE_DEPLOYMENT)
    scope = tenant_scope(principal, *READ_RULES[Resource.DEPLOYMENTS])
    return Deployment.objects.filter(scope | Q(pk__in=granted) if granted else scope)


def reads_fleet_somewhere(principal: Principal) -> bool:
    """Whether any deployment at all is the principal's to read (otherwise the fleet API is a 403, the page a 404)."""
    return (holds_anywhere(principal, *READ_RULES[Resource.DEPLOYMENTS])
            or bool(granted_ids(principal, DEPLOYMENT, VIEW_DEPLOYMENT, CHANGE_DEPLOYMENT)))


def can_manage_deployments(principal: Principal, tenant) -> bool:
    """Platform admins manage every deployment (shared pools too); holders of MANAGE_FLEET their tenant's.

    A permission, not a rank: a key's scopes narrow it (an owner's `audit:read` key manages nothing).
    """
    if principal.is_platform_admin:
        return True
    return tenant is not None and has_perm(principal, tenant, Perm.MANAGE_FLEET)


def can_operate_deployment(principal: Principal, deployment) -> bool:
    """Scale, autoscaling, routing, drain, restart: who manages the tenant's fleet, or holds `change_deployment`
    on this one deployment."""
    if can_manage_deployments(principal, deployment.tenant):
        return True
    return deployment.tenant_id is not None and CHANGE_DEPLOYMENT in object_perms(principal, deployment)


def may_see_internals(principal: Principal, tenant) -> bool:
    """Engine log tails, failure details, endpoints and pids (tenants.roles.INSTANCE_INTERNALS)."""
    return may_read_field(principal, tenant, FIELD_RULES["instance"][1])
