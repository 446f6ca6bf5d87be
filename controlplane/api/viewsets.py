"""Base viewsets: tenant scoping and permission checks happen here, once, for every endpoint."""
from django.http import Http404
from rest_framework import viewsets
from rest_framework.exceptions import PermissionDenied, ValidationError

from tenants.access import Principal, has_perm, visible_tenants
from tenants.models import Membership


class PrincipalMixin:
    @property
    def principal(self) -> Principal:
        return Principal.from_request(self.request)

    def require(self, tenant, *perms: str) -> None:
        """403 unless the caller holds one of `perms` in `tenant` (already visible to them)."""
        if not any(has_perm(self.principal, tenant, perm) for perm in perms):
            raise PermissionDenied("Your role does not allow this action in this tenant.")


class TenantChildViewSet(PrincipalMixin, viewsets.GenericViewSet):
    """Endpoints under /tenants/{tenant_slug}/…: an invisible tenant is a 404, and the queryset
    is always filtered to the URL's tenant, so another tenant's ids cannot be reached.

    Subclasses set `read_perms` (list/retrieve) and `write_perms` (everything else): holding
    any one of them lets the action through.
    """

    read_perms: tuple[str, ...]
    write_perms: tuple[str, ...]
    lookup_value_regex = r"[0-9]+"

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
        self.require(tenant, *(self.read_perms if self.action in ("list", "retrieve") else self.write_perms))

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


class CrossTenantReadMixin(PrincipalMixin):
    """Read-only endpoints spanning tenants (usage, cost): `?tenant=slug` narrows to one tenant.

    A tenant the caller cannot see, or may not read here, is a 404; without `?tenant=` a member
    reads every tenant they may, and only platform admins read tenant-less rows as well.
    """

    read_perms: tuple[str, ...]

    def scoped_tenant_ids(self, slug: str | None) -> list[int] | None:
        """Tenant ids to filter on, or None for everything (platform admins, no `?tenant=`)."""
        if slug:
            tenant = visible_tenants(self.principal).filter(slug=slug).first()
            if tenant is None or not self._may_read(tenant):
                raise Http404("No such tenant.")
            return [tenant.pk]
        if self.principal.is_platform_admin:
            return None
        return [tenant.pk for tenant in visible_tenants(self.principal) if self._may_read(tenant)]

    def _may_read(self, tenant) -> bool:
        return any(has_perm(self.principal, tenant, perm) for perm in self.read_perms)
