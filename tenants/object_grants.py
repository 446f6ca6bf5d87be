"""Per-object grants: one member holds one permission on ONE object of their tenant (django-guardian).

What may be granted on which kind of object is the table `GRANTABLE`; each object permission stands
for a tenant permission (`stands_for`): the granter must hold that one in the object's tenant, and an
API key's scopes must allow it for the grant to count through the key. Writes are
`tenants.services.grant_object_permission` / `revoke_object_permission`; reads come from here, and
`fleet.permissions` folds them into the deployment read and write rules (docs/roles.md).

Only grants on objects of tenants where the caller acts with a role count: a grant outlives no
membership (removing a member removes it) and never reaches through a key bound to another tenant.
"""
from dataclasses import dataclass

from django.apps import apps
from django.contrib.contenttypes.models import ContentType

from tenants.access import Principal, effective_role
from tenants.roles import Perm


@dataclass(frozen=True)
class Grantable:
    """A kind of object that takes per-object grants, and the permissions that may be granted on it."""

    kind: str
    model_label: str
    # object permission codename -> (tenant permission it stands for, what it allows, for people)
    perms: dict[str, tuple[str, str]]

    @property
    def model(self):
        return apps.get_model(self.model_label)

    def stands_for(self, codename: str) -> str:
        return self.perms[codename][0]


# Django's default model permissions, granted on one object: no global permission ever counts
# (tenants.access), so a mistaken model-wide `change_deployment` still widens nothing.
VIEW_DEPLOYMENT, CHANGE_DEPLOYMENT = "view_deployment", "change_deployment"
DEPLOYMENT = Grantable("deployment", "fleet.Deployment", {
    VIEW_DEPLOYMENT: (Perm.VIEW_FLEET, "See this deployment and its instances (state, replicas, health, load)"),
    CHANGE_DEPLOYMENT: (Perm.MANAGE_FLEET, "Operate this deployment: scale, autoscaling, routing, drain and restart "
                                           "its instances (and see it)"),
})
GRANTABLE = {DEPLOYMENT.kind: DEPLOYMENT}


def grantable_for(obj) -> Grantable:
    """The GRANTABLE entry of `obj`'s model (a LookupError for a model that takes no grants)."""
    for grantable in GRANTABLE.values():
        if isinstance(obj, grantable.model):
            return grantable
    raise LookupError(f"{type(obj).__name__} takes no per-object grants.")


def grants_on(obj):
    """Guardian's user grants on this very object, with their users and permissions (never global ones)."""
    from guardian.models import UserObjectPermission

    return (UserObjectPermission.objects.filter(content_type=ContentType.objects.get_for_model(type(obj)),
                                                object_pk=str(obj.pk))
            .select_related("user", "permission").order_by("user__username", "permission__codename"))


def grants_of_user_in_tenant(grantable: Grantable, tenant, user):
    """A member's grants on the tenant's objects of one kind (what removing the member removes)."""
    from guardian.models import UserObjectPermission

    ids = [str(pk) for pk in grantable.model.objects.filter(tenant=tenant).values_list("pk", flat=True)]
    return UserObjectPermission.objects.filter(
        content_type=ContentType.objects.get_for_model(grantable.model), object_pk__in=ids, user=user,
    ).select_related("user", "permission")


def granted_ids(principal: Principal, grantable: Grantable, *codenames: str) -> list[int]:
    """Ids of the objects on which the principal holds one of `codenames` and may use it.

    Platform admins need no grants (they hold everything) and get []; so does a key without a scope
    that allows the permission a grant stands for, and a grant on an object of a tenant where the
    principal has no role (a removed member, a key bound to another tenant).
    """
    return sorted(_usable(principal, grantable, codenames))


def object_perms(principal: Principal, obj) -> frozenset[str]:
    """The usable grants the principal holds on `obj` (codenames)."""
    grantable = grantable_for(obj)
    return frozenset(code for code in grantable.perms if obj.pk in _usable(principal, grantable, (code,)))


def _usable(principal: Principal, grantable: Grantable, codenames) -> set[int]:
    key = ("object_grants", grantable.kind, tuple(sorted(codenames)))
    memo = principal.memo
    if memo is not None and key in memo:
        return memo[key]
    found = _compute_usable(principal, grantable, codenames)
    if memo is not None:
        memo[key] = found
    return found


def _compute_usable(principal: Principal, grantable: Grantable, codenames) -> set[int]:
    from guardian.models import UserObjectPermission

    user = principal.user
    if principal.is_platform_admin or not user.is_authenticated or user.pk is None:
        return set()
    codenames = [code for code in codenames if _scope_allows(principal, grantable.stands_for(code))]
    if not codenames:
        return set()
    rows = UserObjectPermission.objects.filter(
        user=user, content_type=ContentType.objects.get_for_model(grantable.model),
        permission__codename__in=codenames).values_list("object_pk", flat=True)
    ids = {int(pk) for pk in rows if str(pk).isdigit()}
    objects = grantable.model.objects.filter(pk__in=ids, tenant__isnull=False).select_related("tenant")
    return {obj.pk for obj in objects if effective_role(principal, obj.tenant) is not None}


def _scope_allows(principal: Principal, tenant_perm: str) -> bool:
    if principal.api_key is None:
        return True
    from apikeys.scopes import permissions_for_scopes

    return tenant_perm in permissions_for_scopes(principal.api_key.scopes)
