"""Who may change deployments — one rule for the REST API and the console."""
from tenants.access import Principal, effective_role
from tenants.roles import ROLE_RANK, Role


def can_manage_deployments(principal: Principal, tenant) -> bool:
    """Platform admins manage every deployment (shared pools too); a tenant's owners and admins its own."""
    if principal.is_platform_admin:
        return True
    role = effective_role(principal, tenant) if tenant is not None else None
    return role is not None and ROLE_RANK[Role(role)] >= ROLE_RANK[Role.ADMIN]
