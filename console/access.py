"""Which console pages and tenants a signed-in user may open — built on tenants.access, decided here once.

Pages a user may not see answer 404 (they learn nothing, not even that the tenant exists);
actions on a page they can see but may not take answer 403.
"""
from django.core.exceptions import PermissionDenied
from django.http import Http404

from fleet.permissions import can_manage_deployments
from tenants.access import (
    Principal,
    grant_refusal,
    has_perm,
    holds_anywhere,
    principal_for,
    rank_refusal,
    tenants_with,
    visible_tenants,
)
from tenants.roles import READ_RULES, Perm, Resource

# Operational pages (overview, tenants, keys) list tenants whose members the user may read: every role
# but auditor, whose console is the audit trail alone. Fleet, models and usage pages read under their own
# rule (tenants.roles.READ_RULES), the one the REST API applies too.
OPERATIONS = Perm.VIEW_MEMBERS
KEY_PERMS = READ_RULES[Resource.KEYS]
# Slow requests show (redacted) prompt text: the tenant's owners and admins only.
SLOW_REQUESTS = Perm.MANAGE_MEMBERS
# Budgets and key / user quotas: whoever may read quota policies (every role but auditor).
QUOTAS = Perm.VIEW_QUOTAS
FLEET, REGISTRY, USAGE = READ_RULES[Resource.DEPLOYMENTS], READ_RULES[Resource.REGISTRY], READ_RULES[Resource.USAGE]

def principal_of(request) -> Principal:
    """The console's caller: a session user, never an API key (one memoizing principal per request)."""
    return principal_for(request)


def tenant_or_404(request, slug: str, *perms: str):
    """The tenant named by the URL, if the user may open it with any of `perms`; otherwise 404."""
    principal = principal_of(request)
    tenant = visible_tenants(principal).filter(slug=slug).first()
    if tenant is None or not any(has_perm(principal, tenant, p) for p in perms or (OPERATIONS,)):
        raise Http404("No such tenant.")
    return tenant


def require(request, tenant, perm: str) -> None:
    """403 unless the user holds `perm` in `tenant` (the page itself was visible)."""
    if not has_perm(principal_of(request), tenant, perm):
        raise PermissionDenied("Your role in this tenant does not allow this.")


def require_platform_admin(request, *, hide: bool = False) -> None:
    """Platform-only actions: 403 (or 404 for pages that should not be known to exist)."""
    if not principal_of(request).is_platform_admin:
        raise (Http404("Not found.") if hide else PermissionDenied("Only platform admins may do this."))


def sees_operations(principal: Principal) -> bool:
    return principal.is_platform_admin or bool(tenants_with(principal, OPERATIONS))


def page_or_404(request, perms: tuple[str, ...]) -> Principal:
    """The principal, if they hold one of `perms` somewhere (a READ_RULES entry); otherwise 404."""
    principal = principal_of(request)
    if not holds_anywhere(principal, *perms):
        raise Http404("Not found.")
    return principal


def sees_audit(principal: Principal) -> bool:
    return principal.is_platform_admin or bool(tenants_with(principal, Perm.VIEW_AUDIT))


def budget_tenants(principal: Principal) -> list:
    """The budgets page shows a tenant's budgets (quota policy) beside what it spent (usage): both rules hold."""
    return [t for t in tenants_with(principal, QUOTAS) if any(has_perm(principal, t, p) for p in USAGE)]


def sees_budgets(principal: Principal) -> bool:
    return principal.is_platform_admin or bool(budget_tenants(principal))


def sees_slow_requests(principal: Principal) -> bool:
    return principal.is_platform_admin or bool(tenants_with(principal, SLOW_REQUESTS))


def operations_or_404(request) -> Principal:
    """The principal, if they may open the operational pages at all (auditors may not)."""
    principal = principal_of(request)
    if not sees_operations(principal):
        raise Http404("Not found.")
    return principal


def budgets_or_404(request) -> Principal:
    """The principal, if some tenant's quota policies are theirs to read (auditors: 404)."""
    principal = principal_of(request)
    if not sees_budgets(principal):
        raise Http404("Not found.")
    return principal


def require_rank(request, tenant, role: str) -> None:
    """403 unless the user's role in `tenant` is at or above `role` (granting, managing keys)."""
    refusal = rank_refusal(principal_of(request), tenant, role)
    if refusal:
        raise PermissionDenied(refusal)


def require_may_grant(request, tenant, perm: str, member_role: str | None) -> None:
    """403 unless the user may grant the tenant permission `perm` to a member with `member_role` (tenants.access)."""
    refusal = grant_refusal(principal_of(request), tenant, perm, member_role)
    if refusal:
        raise PermissionDenied(refusal)


def can_manage_fleet(principal: Principal, tenant) -> bool:
    """The fleet API's rule, so the console never offers what the API would refuse."""
    return can_manage_deployments(principal, tenant)
