"""Which console pages and tenants a signed-in user may open — built on tenants.access, decided here once.

Pages a user may not see answer 404 (they learn nothing, not even that the tenant exists);
actions on a page they can see but may not take answer 403.
"""
from django.core.exceptions import PermissionDenied
from django.http import Http404

from fleet.permissions import can_manage_deployments
from tenants.access import Principal, effective_role, has_perm, prefetch_roles, visible_tenants
from tenants.roles import Perm, Role, outranks_or_equals

# Operational pages (overview, tenants, keys, fleet, models, usage) list tenants whose members the
# user may read: every role but auditor, whose console is the audit trail alone.
OPERATIONS = Perm.VIEW_MEMBERS
KEY_PERMS = (Perm.VIEW_KEYS, Perm.MANAGE_KEYS, Perm.MANAGE_OWN_KEYS)
# Slow requests show (redacted) prompt text: the tenant's owners and admins only.
SLOW_REQUESTS = Perm.MANAGE_MEMBERS
# Budgets and key / user quotas: whoever may read quota policies (every role but auditor).
QUOTAS = Perm.VIEW_QUOTAS


def principal_of(request) -> Principal:
    """The console's caller: a session user, never an API key.

    One principal per request and user, memoizing roles and permissions: a page and its navigation
    ask ~20 permission questions about the same few tenants.
    """
    principal = getattr(request, "_console_principal", None)
    if principal is None or principal.user is not request.user:  # login() replaces request.user
        principal = Principal(user=request.user, memo={})
        request._console_principal = principal
    return principal


def tenants_with(principal: Principal, *perms: str) -> list:
    """Visible tenants where the principal holds any of `perms`, by slug."""
    tenants = _visible_by_slug(principal)
    prefetch_roles(principal, tenants)
    return [t for t in tenants if any(has_perm(principal, t, p) for p in perms)]


def _visible_by_slug(principal: Principal) -> list:
    if principal.memo is None:
        return list(visible_tenants(principal).order_by("slug"))
    if "visible_by_slug" not in principal.memo:
        principal.memo["visible_by_slug"] = list(visible_tenants(principal).order_by("slug"))
    return principal.memo["visible_by_slug"]


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


def sees_audit(principal: Principal) -> bool:
    return principal.is_platform_admin or bool(tenants_with(principal, Perm.VIEW_AUDIT))


def sees_budgets(principal: Principal) -> bool:
    return principal.is_platform_admin or bool(tenants_with(principal, QUOTAS))


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
    own = effective_role(principal_of(request), tenant)
    if own is None or not outranks_or_equals(own, role):
        raise PermissionDenied(f"Your role cannot grant or manage the {Role(role).label.lower()} role.")


def can_manage_fleet(principal: Principal, tenant) -> bool:
    """The fleet API's rule, so the console never offers what the API would refuse."""
    return can_manage_deployments(principal, tenant)
