"""Tenants and members over REST."""
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from audit.actor import Actor
from controlplane.api.schema import BAD_REQUEST, conflict
from controlplane.api.viewsets import PrincipalMixin, TenantChildViewSet
from tenants import services
from tenants.access import grant_refusal, member_role, rank_refusal, tenant_scope
from tenants.api import serializers as s
from tenants.models import Invitation, Membership, Tenant, TenantStatus
from tenants.roles import READ_RULES, Perm, Resource


class TenantViewSet(PrincipalMixin, viewsets.GenericViewSet):
    """Tenants the caller can see. Platform admins create, suspend and delete them."""

    serializer_class = s.TenantSerializer
    lookup_field = "slug"
    lookup_value_regex = r"[a-z0-9-]+"
    filterset_fields = ["status", "isolation", "region"]

    def get_queryset(self):
        readable = tenant_scope(self.principal, *READ_RULES[Resource.TENANT], field="pk")
        return Tenant.objects.filter(readable).order_by("slug")

    def list(self, request):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def retrieve(self, request, slug=None):
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(request=s.TenantCreateSerializer, responses={201: s.TenantCreatedSerializer})
    def create(self, request):
        self._require_platform()
        data = self._valid(s.TenantCreateSerializer)
        tenant = services.create_tenant(**data, actor=Actor.from_request(request))
        return Response(s.TenantCreatedSerializer(tenant).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.PlatformTenantUpdateSerializer, responses=s.TenantSerializer)
    def partial_update(self, request, slug=None):
        tenant = self.get_object()
        self.require(tenant, Perm.UPDATE_TENANT)
        serializer_class = (s.PlatformTenantUpdateSerializer if self.principal.is_platform_admin
                            else s.TenantUpdateSerializer)
        tenant = services.update_tenant(tenant, **self._valid(serializer_class), actor=Actor.from_request(request))
        return Response(s.TenantSerializer(tenant).data)

    @extend_schema(responses={204: None, 400: BAD_REQUEST,  # 400 or 409: the tenant still has deployments
                              409: conflict("A deployment of the tenant was created while it was being deleted.")})
    def destroy(self, request, slug=None):
        tenant = self.get_object()
        self._require_platform()
        services.delete_tenant(tenant, actor=Actor.from_request(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def suspend(self, request, slug=None):
        return self._set_status(TenantStatus.SUSPENDED)

    @extend_schema(request=None, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def activate(self, request, slug=None):
        return self._set_status(TenantStatus.ACTIVE)

    def _set_status(self, new_status):
        tenant = self.get_object()
        self._require_platform()
        tenant = services.set_tenant_status(tenant, new_status, actor=Actor.from_request(self.request))
        return Response(s.TenantSerializer(tenant).data)

    def _require_platform(self):
        if not self.principal.is_platform_admin:
            raise PermissionDenied("Only platform admins may do this.")

    def _valid(self, serializer_class) -> dict:
        serializer = serializer_class(data=self.request.data)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data


class MembershipViewSet(TenantChildViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Members of one tenant. Nobody grants a role above their own or edits a higher-ranked member."""

    queryset = Membership.objects.select_related("user")
    serializer_class = s.MembershipSerializer
    resource = Resource.MEMBERS
    write_perms = (Perm.MANAGE_MEMBERS,)
    filterset_fields = ["role"]

    @extend_schema(request=s.MembershipCreateSerializer, responses={201: s.InvitationSerializer})
    def create(self, request, tenant_slug=None):
        """Adding a member invites the address (the same as POST …/invitations/)."""
        return invite(self, request)

    @extend_schema(request=s.MembershipUpdateSerializer, responses=s.MembershipSerializer)
    def partial_update(self, request, tenant_slug=None, pk=None):
        membership = self.get_object()
        serializer = s.MembershipUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        self._check_can_grant(membership.role)
        self._check_can_grant(serializer.validated_data["role"])
        membership = services.change_member_role(membership, serializer.validated_data["role"],
                                                 actor=Actor.from_request(request))
        return Response(s.MembershipSerializer(membership).data)

    @extend_schema(responses={204: None, 400: BAD_REQUEST})  # 400: the last owner cannot leave
    def destroy(self, request, tenant_slug=None, pk=None):
        membership = self.get_object()
        self._check_can_grant(membership.role)
        services.remove_member(membership, actor=Actor.from_request(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _check_can_grant(self, role: str) -> None:
        check_can_grant(self, role)


def check_can_grant(view, role: str) -> None:
    refusal = rank_refusal(view.principal, view.get_tenant(), role)
    if refusal:
        raise PermissionDenied(refusal)


def invite(view, request) -> Response:
    """Invite an address: never looks an account up, so the answer says nothing about accounts elsewhere."""
    serializer = s.MembershipCreateSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    check_can_grant(view, serializer.validated_data["role"])
    invitation = services.invite_member(tenant=view.get_tenant(), actor=Actor.from_request(request),
                                        **serializer.validated_data)
    return Response(s.InvitationSerializer(invitation).data, status=status.HTTP_201_CREATED)


class InvitationViewSet(TenantChildViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Invitations of one tenant: who may list members sees them; who manages members invites and revokes."""

    queryset = Invitation.objects.all()
    serializer_class = s.InvitationSerializer
    resource = Resource.MEMBERS
    write_perms = (Perm.MANAGE_MEMBERS,)
    filterset_fields = ["status", "role"]

    @extend_schema(request=s.MembershipCreateSerializer, responses={201: s.InvitationSerializer})
    def create(self, request, tenant_slug=None):
        return invite(self, request)

    def destroy(self, request, tenant_slug=None, pk=None):
        """Revoke a pending invitation (the record is kept)."""
        invitation = self.get_object()
        check_can_grant(self, invitation.role)
        services.revoke_invitation(invitation, actor=Actor.from_request(request))
        return Response(status=status.HTTP_204_NO_CONTENT)




class GrantViewSet(TenantChildViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Per-object grants on one tenant (django-guardian): one member, one permission beyond their role.

    Read by whoever lists members; written by who manages members, for permissions they hold themselves
    and members they outrank or equal — a grant never hands out more than its granter has.
    """

    serializer_class = s.GrantSerializer
    resource = Resource.MEMBERS
    write_perms = (Perm.MANAGE_MEMBERS,)

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Membership.objects.none()
        return services.tenant_grants(self.get_tenant())

    @extend_schema(request=s.GrantCreateSerializer, responses={201: s.GrantSerializer})
    def create(self, request, tenant_slug=None):
        serializer = s.GrantCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        user = self.tenant_member(serializer.validated_data["user_id"])
        perm = serializer.validated_data["permission"]
        self._check_may_grant(user, perm)
        grant = services.grant_permission(tenant=self.get_tenant(), user=user, perm=perm,
                                          actor=Actor.from_request(request))
        return Response(s.GrantSerializer(grant).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None})
    def destroy(self, request, tenant_slug=None, pk=None):
        grant = self.get_object()
        self._check_may_grant(grant.user, grant.permission.codename)
        services.revoke_permission(grant, actor=Actor.from_request(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _check_may_grant(self, user, perm: str) -> None:
        tenant = self.get_tenant()
        refusal = grant_refusal(self.principal, tenant, perm, member_role(user, tenant))
        if refusal:
            raise PermissionDenied(refusal)
