"""Who may see and do what in which tenant — the one place tenant scoping is decided.

Lists are scoped by plain tenant foreign keys (`visible_tenants`), never by guardian's
`get_objects_for_user`, and no code here consults a user's global (model-level) permissions:
a global grant given by mistake widens nothing.
"""
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.db.models import Q, QuerySet
from guardian.core import ObjectPermissionChecker
from guardian.shortcuts import get_perms

from tenants.models import Membership, Tenant
from tenants.roles import ROLE_PERMISSIONS, ROLE_RANK, Perm, Role, outranks_or_equals

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User

    from apikeys.models import ApiKey

ALL_PERMS = frozenset(Perm.values)


@dataclass(frozen=True)
class Principal:
    """The caller: a user, optionally acting through an API key."""

    user: "User | AnonymousUser"
    api_key: "ApiKey | None" = None
    # Roles, object grants and permissions already looked up, by tenant id; None = look up every time.
    # Only for a principal that lives one request (console.access.principal_of): a role changed later
    # in that request is not seen, which is fine because every view checks before it writes.
    memo: dict | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_request(cls, request) -> "Principal":
        from apikeys.models import ApiKey

        auth = getattr(request, "auth", None)
        return cls(user=request.user, api_key=auth if isinstance(auth, ApiKey) else None)

    @property
    def bound_tenant_id(self):
        """A tenant-bound key confines its caller to that one tenant."""
        return self.api_key.tenant_id if self.api_key is not None else None

    @property
    def is_platform_admin(self) -> bool:
        """Django staff, through the console or a platform (tenant-less) key with the `admin` scope.

        A staff member's tenant-less key with narrower scopes (`audit:read`) is no platform admin:
        platform powers ignore scopes, so they are not handed to a key that was meant to be narrow.
        """
        if not (self.user.is_authenticated and (self.user.is_staff or self.user.is_superuser)):
            return False
        if self.api_key is None:
            return True
        from apikeys.scopes import Scope

        return self.api_key.tenant_id is None and Scope.ADMIN in (self.api_key.scopes or [])


def principal_for(request) -> Principal:
    """The request's caller, made once per request and memoizing its roles and permissions.

    Both the REST API (a user, maybe through a key) and the console (a session user) ask many
    permission questions about the same few tenants in one request. Kept on the underlying Django
    request, so DRF's wrapper and the view share it; rebuilt if authentication changed the caller
    (the console's sign-in replaces `request.user`).
    """
    holder = getattr(request, "_request", request)
    principal = getattr(holder, "_switchyard_principal", None)
    fresh = Principal.from_request(request)
    if principal is None or principal.user is not fresh.user or principal.api_key is not fresh.api_key:
        principal = Principal(user=fresh.user, api_key=fresh.api_key, memo={})
        holder._switchyard_principal = principal
    return principal


def visible_tenants(principal: Principal) -> QuerySet:
    """Every tenant the principal may see at all."""
    if principal.api_key is not None:
        return _tenants_for_key(principal, principal.api_key)
    if principal.is_platform_admin:
        return Tenant.objects.all()
    if not principal.user.is_authenticated:
        return Tenant.objects.none()
    return Tenant.objects.filter(memberships__user=principal.user)


def _tenants_for_key(principal: Principal, key: "ApiKey") -> QuerySet:
    if key.tenant_id is None:
        return Tenant.objects.all() if principal.is_platform_admin else Tenant.objects.none()
    return Tenant.objects.filter(pk=key.tenant_id)


def member_role(user, tenant) -> str | None:
    """The user's role in the tenant, or None when not a member."""
    if not user.is_authenticated:
        return None
    return Membership.objects.filter(user=user, tenant=tenant).values_list("role", flat=True).first()


def _memoized(principal: Principal, key: tuple, compute):
    if principal.memo is None:
        return compute()
    if key not in principal.memo:
        principal.memo[key] = compute()
    return principal.memo[key]


def effective_role(principal: Principal, tenant) -> str | None:
    """The role the principal acts with in `tenant`; a key never exceeds its owner's current role."""
    return _memoized(principal, ("role", tenant.pk), lambda: _effective_role(principal, tenant))


def _effective_role(principal: Principal, tenant) -> str | None:
    if principal.is_platform_admin:
        return Role.OWNER
    if principal.api_key is None:
        return member_role(principal.user, tenant)
    return _key_role(principal.api_key, tenant)


def _key_role(key: "ApiKey", tenant) -> str | None:
    if key.tenant_id != tenant.pk:
        return None
    owner = key.user
    if owner is None:
        return key.role
    owner_role = Role.OWNER if (owner.is_staff or owner.is_superuser) else member_role(owner, tenant)
    if owner_role is None:
        return None
    return min(key.role, owner_role, key=lambda role: ROLE_RANK[Role(role)])


def tenant_permissions(principal: Principal, tenant) -> frozenset[str]:
    """What the principal may do in `tenant`: role table ∪ guardian object grants, ∩ key scopes."""
    return _memoized(principal, ("perms", tenant.pk), lambda: _tenant_permissions(principal, tenant))


def _tenant_permissions(principal: Principal, tenant) -> frozenset[str]:
    if principal.is_platform_admin:
        return ALL_PERMS
    role = effective_role(principal, tenant)
    if role is None:
        return frozenset()
    grants = _memoized(principal, ("grants", tenant.pk), lambda: _object_grants(principal.user, tenant))
    perms = ROLE_PERMISSIONS[Role(role)] | grants
    if principal.api_key is not None:
        from apikeys.scopes import permissions_for_scopes

        perms &= permissions_for_scopes(principal.api_key.scopes)
    return perms


def _object_grants(user, tenant) -> frozenset[str]:
    """Guardian grants on this very tenant object (never global ones)."""
    if not user.is_authenticated or user.pk is None:
        return frozenset()
    return frozenset(get_perms(user, tenant)) & ALL_PERMS


def has_perm(principal: Principal, tenant, perm: str) -> bool:
    return perm in tenant_permissions(principal, tenant)


def rank_refusal(principal: Principal, tenant, role: str) -> str | None:
    """Why the principal may not hand out or manage `role` in `tenant` (their own role must be at or above it);
    None when they may."""
    if not outranks_or_equals(effective_role(principal, tenant), role):
        return f"Your role cannot grant or manage the {Role(role).label.lower()} role."
    return None


def grant_refusal(principal: Principal, tenant, perm: str, member_role: str | None) -> str | None:
    """Why the principal may not grant (or revoke) the tenant permission `perm` — in the tenant or on one of its
    objects, through what it stands for — to a member with `member_role`; None when they may. One can grant only
    what one holds, and only to a member one outranks or equals (no membership: owners only). The REST API and the
    console both ask here."""
    if not has_perm(principal, tenant, perm):
        return "You cannot grant a permission you do not hold."
    return rank_refusal(principal, tenant, member_role or Role.OWNER)


def prefetch_roles(principal: Principal, tenants: list) -> None:
    """Fill a memoizing session principal's roles and object grants for many tenants in three queries.

    The same answers `member_role` and `_object_grants` give one tenant at a time (a membership is
    unique per user and tenant; guardian's checker prefetches exactly what `get_perms` reads).
    """
    memo = principal.memo
    if memo is None or principal.api_key is not None or principal.is_platform_admin:
        return
    missing = [tenant for tenant in tenants if ("role", tenant.pk) not in memo]
    if not missing or not principal.user.is_authenticated or principal.user.pk is None:
        return
    roles = dict(Membership.objects.filter(user=principal.user, tenant__in=[t.pk for t in missing])
                 .values_list("tenant_id", "role"))
    checker = ObjectPermissionChecker(principal.user)
    checker.prefetch_perms(missing)  # type: ignore[arg-type]  # guardian takes any list of objects; its hint says QuerySet
    for tenant in missing:
        memo[("role", tenant.pk)] = roles.get(tenant.pk)
        memo[("grants", tenant.pk)] = frozenset(checker.get_perms(tenant)) & ALL_PERMS


def tenants_with(principal: Principal, *perms: str) -> list:
    """Visible tenants where the principal holds any of `perms`, by slug (roles and grants prefetched)."""
    tenants = _visible_by_slug(principal)
    prefetch_roles(principal, tenants)
    return [t for t in tenants if any(has_perm(principal, t, p) for p in perms)]


def _visible_by_slug(principal: Principal) -> list:
    if principal.memo is None:
        return list(visible_tenants(principal).order_by("slug"))
    if "visible_by_slug" not in principal.memo:
        principal.memo["visible_by_slug"] = list(visible_tenants(principal).order_by("slug"))
    return principal.memo["visible_by_slug"]


def holds_anywhere(principal: Principal, *perms: str) -> bool:
    """Platform admins, or whoever holds one of `perms` in some tenant (tenant-less resources: the registry)."""
    return principal.is_platform_admin or bool(tenants_with(principal, *perms))


def tenant_ids_with(principal: Principal, *perms: str) -> list[int] | None:
    """Ids of the tenants whose rows the principal may read under `perms`; None = every row (platform admins)."""
    return None if principal.is_platform_admin else [t.pk for t in tenants_with(principal, *perms)]


def tenant_scope(principal: Principal, *perms: str, field: str = "tenant") -> Q:
    """A filter to rows of tenants where the principal holds one of `perms`.

    Tenant-less rows (shared pools) pass for platform admins only: `field__in` never matches NULL.
    """
    ids = tenant_ids_with(principal, *perms)
    return Q() if ids is None else Q(**{f"{field}__in": ids})


def may_read_field(principal: Principal, tenant, perm: str) -> bool:
    """A restricted field (tenants.roles.FIELD_RULES) of a row of `tenant`; tenant-less rows: `perm` anywhere."""
    if principal.is_platform_admin:
        return True
    return has_perm(principal, tenant, perm) if tenant is not None else holds_anywhere(principal, perm)
