"""Base viewsets: tenant scoping and permission checks happen here, once, for every endpoint.

What reading each resource needs is `tenants.roles.READ_RULES` (the console reads the same table);
a viewset names its `resource` and never chooses permissions of its own for reading.
"""
from typing import Any

from django.http import Http404
from rest_framework import viewsets
from rest_framework.exceptions import PermissionDenied, ValidationError

from tenants.access import (
    Principal,
    has_perm,
    holds_anywhere,
    principal_for,
    tenant_scope,
    tenants_with,
    visible_tenants,
)
from tenants.models import Membership
from tenants.roles import READ_RULES

READ_ACTIONS = ("list", "retrieve")


class PrincipalMixin:
    request: Any  # the view's (a DRF Request; Django's View declares an HttpRequest)

    @property
    def principal(self) -> Principal:
        return principal_for(self.request)

    def require(self, tenant, *perms: str) -> None:
        """403 unless the caller holds one of `perms` in `tenant` (already visible to them)."""
        if not any(has_perm(self.principal, tenant, perm) for perm in perms):
            raise PermissionDenied("Your role does not allow this action in this tenant.")


class ReadRuleMixin(PrincipalMixin):
    """`resource` names the READ_RULES entry; a caller who may read it in no tenant gets 403 for every action."""

    resource: str

    @property
    def read_perms(self) -> tuple[str, ...]:
        return READ_RULES[self.resource]

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication first: anonymous → 401
        if not self.reads_somewhere():
            raise PermissionDenied("Your role does not allow reading this.")

    def reads_somewhere(self) -> bool:
        """Whether any row of `resource` is the caller's to read (deployments add per-object grants)."""
        return holds_anywhere(self.principal, *self.read_perms)


class TenantChildViewSet(PrincipalMixin, viewsets.GenericViewSet):
    """Endpoints under /tenants/{tenant_slug}/…: an invisible tenant is a 404, and the queryset
    is always filtered to the URL's tenant, so another tenant's ids cannot be reached.

    Subclasses name their `resource` (reading needs its READ_RULES entry) and `write_perms`
    (everything else): holding any one of them lets the action through.
    """

    resource: str
    write_perms: tuple[str, ...]
    lookup_value_regex = r"[0-9]+"

    @property
    def read_perms(self) -> tuple[str, ...]:
        return READ_RULES[self.resource]

    def get_tenant(self):
        if not hasattr(self, "_tenant"):
            slug = self.kwargs["tenant_slug"]
            tenant = visible_tenants(self.principal).filter(slug=slug).first()
            if tenant is None:
                raise Http404("No such tenant.")
            self._tenant = tenant
        return self._tenant

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication first: anonymous → 401, never 404
        tenant = self.get_tenant()
        self.require(tenant, *(self.read_perms if self.action in READ_ACTIONS else self.write_perms))

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # OpenAPI generation has no tenant
            return self.queryset.none()
        return self.base_queryset().filter(tenant=self.get_tenant())

    def base_queryset(self):
        return self.queryset.all()

    def tenant_member(self, user_id, *, field: str = "user_id"):
        """The user behind `user_id` if they are a member of this tenant; a 400 naming `field` otherwise."""
        if user_id is None:
            return None
        membership = Membership.objects.filter(tenant=self.get_tenant(), user_id=user_id).select_related("user").first()
        if membership is None:
            raise ValidationError({field: "No such member in this tenant."})
        return membership.user


class TenantScopedViewSet(ReadRuleMixin, viewsets.GenericViewSet):
    """Top-level endpoints over rows that belong to a tenant (/deployments/): the queryset holds only
    rows of tenants where the caller may read `resource`, so another tenant's id is a 404 like a
    missing one; tenant-less rows (shared pools) are for platform admins only. Writes check more."""

    tenant_field = "tenant"

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return self.queryset.none()
        return self.base_queryset().filter(tenant_scope(self.principal, *self.read_perms, field=self.tenant_field))

    def base_queryset(self):
        return self.queryset.all()


class CrossTenantReadMixin(ReadRuleMixin):
    """Read-only endpoints spanning tenants (usage, cost): `?tenant=slug` narrows to one tenant.

    A tenant the caller cannot see, or may not read here, is a 404; without `?tenant=` a member
    reads every tenant they may, and only platform admins read tenant-less rows as well.
    """

    def scoped_tenant_ids(self, slug: str | None) -> list[int] | None:
        """Tenant ids to filter on, or None for everything (platform admins, no `?tenant=`)."""
        if slug:
            tenant = visible_tenants(self.principal).filter(slug=slug).first()
            if tenant is None or not any(has_perm(self.principal, tenant, p) for p in self.read_perms):
                raise Http404("No such tenant.")
            return [tenant.pk]
        if self.principal.is_platform_admin:
            return None
        return [tenant.pk for tenant in tenants_with(self.principal, *self.read_perms)]
