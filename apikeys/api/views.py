"""API keys of one tenant (developers manage only their own inference keys), and platform keys."""
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from apikeys import services
from apikeys.api import serializers as s
from apikeys.models import ApiKey
from apikeys.scopes import Scope
from audit.actor import Actor
from controlplane.api.viewsets import PrincipalMixin, TenantChildViewSet
from tenants.access import effective_role, has_perm
from tenants.roles import Perm, Resource, Role, outranks_or_equals


class ApiKeyViewSet(TenantChildViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    queryset = ApiKey.objects.select_related("user", "rotated_from")
    serializer_class = s.ApiKeySerializer
    # Holders of MANAGE_OWN_KEYS alone see and touch only their own keys (base_queryset).
    resource = Resource.KEYS
    write_perms = (Perm.MANAGE_KEYS, Perm.MANAGE_OWN_KEYS)
    filterset_fields = ["role"]

    def base_queryset(self):
        keys = super().base_queryset()
        tenant = self.get_tenant()
        writing = self.action not in ("list", "retrieve")
        if has_perm(self.principal, tenant, Perm.MANAGE_KEYS) or (
                not writing and has_perm(self.principal, tenant, Perm.VIEW_KEYS)):
            return keys
        return keys.filter(user_id=self.request.user.pk) if self.request.user.pk else keys.none()

    @extend_schema(request=s.ApiKeyCreateSerializer, responses={201: s.MintedKeySerializer})
    def create(self, request, tenant_slug=None):
        serializer = s.ApiKeyCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        fields = self._key_fields(serializer.validated_data)
        minted = services.create_api_key(tenant=self.get_tenant(), actor=Actor.from_request(request), **fields)
        return Response(s.minted_response(minted), status=status.HTTP_201_CREATED)

    def _key_fields(self, data: dict) -> dict:
        tenant = self.get_tenant()
        own_role = effective_role(self.principal, tenant)
        role = data.get("role", Role.DEVELOPER)
        if not outranks_or_equals(own_role, role):
            raise PermissionDenied("You cannot mint a key with a role above your own.")
        if has_perm(self.principal, tenant, Perm.MANAGE_KEYS):
            user = self.tenant_member(data.get("user_id"))
            # Whoever holds a key can act as its owner in the audit trail: only the owner mints it.
            if user is not None and user.pk != self.request.user.pk:
                raise PermissionDenied("A personal key can only be created by its owner; "
                                       "omit user_id for a service key.")
        else:  # self-service: an inference key of one's own, nothing more
            if not self.request.user.pk:
                # A service key belongs to no person: there is nobody whose "own" key it could mint.
                raise PermissionDenied("A service key needs the manage_keys permission to create keys.")
            if set(data["scopes"]) != {Scope.INFERENCE} or data.get("user_id") not in (None, self.request.user.pk):
                raise PermissionDenied("Your role may only create inference keys for yourself.")
            user, role = self.request.user, Role.DEVELOPER
        return {"name": data["name"], "scopes": data["scopes"], "role": role, "user": user,
                "expires_at": data.get("expires_at")}

    @extend_schema(request=None, responses=s.ApiKeySerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request, tenant_slug=None, pk=None):
        key = services.revoke_api_key(self._manageable_key(), actor=Actor.from_request(request))
        return Response(s.ApiKeySerializer(key).data)

    def destroy(self, request, tenant_slug=None, pk=None):
        """DELETE revokes (keys are kept for the record, never erased)."""
        services.revoke_api_key(self._manageable_key(), actor=Actor.from_request(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=s.ApiKeyRotateSerializer, responses={201: s.MintedKeySerializer})
    @action(detail=True, methods=["post"])
    def rotate(self, request, tenant_slug=None, pk=None):
        key = self._manageable_key()
        serializer = s.ApiKeyRotateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        minted = services.rotate_api_key(key, grace_seconds=serializer.validated_data.get("grace_seconds"),
                                         actor=Actor.from_request(request))
        return Response(s.minted_response(minted), status=status.HTTP_201_CREATED)

    def _manageable_key(self) -> ApiKey:
        """The URL's key, unless its role outranks the caller's: rotating it would mint a
        credential above one's own role, and revoking it would edit a higher-ranked member."""
        key = self.get_object()
        if not outranks_or_equals(effective_role(self.principal, self.get_tenant()), key.role):
            raise PermissionDenied("Your role cannot manage a key with a role above your own.")
        return key


class PlatformKeyViewSet(PrincipalMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Platform (tenant-less) keys: platform admins mint them for automation that needs no console session.

    Each key belongs to the platform admin who mints it and acts as them, so it loses every power
    the moment they stop being staff. Anyone else gets 403, whatever their roles in tenants.
    """

    queryset = ApiKey.objects.filter(tenant__isnull=True).select_related("user", "rotated_from")
    serializer_class = s.ApiKeySerializer
    lookup_value_regex = r"[0-9]+"

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication first: anonymous → 401
        if not self.principal.is_platform_admin:
            raise PermissionDenied("Only platform admins may see or mint platform keys.")

    @extend_schema(request=s.PlatformKeyCreateSerializer, responses={201: s.MintedKeySerializer})
    def create(self, request):
        serializer = s.PlatformKeyCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        minted = services.create_platform_key(user=request.user, actor=Actor.from_request(request),
                                              **serializer.validated_data)
        return Response(s.minted_response(minted), status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=s.ApiKeySerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        key = services.revoke_api_key(self.get_object(), actor=Actor.from_request(request))
        return Response(s.ApiKeySerializer(key).data)

    def destroy(self, request, pk=None):
        """DELETE revokes (keys are kept for the record, never erased)."""
        services.revoke_api_key(self.get_object(), actor=Actor.from_request(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=s.ApiKeyRotateSerializer, responses={201: s.MintedKeySerializer})
    @action(detail=True, methods=["post"])
    def rotate(self, request, pk=None):
        serializer = s.ApiKeyRotateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        grace = serializer.validated_data.get("grace_seconds")
        minted = services.rotate_api_key(self.get_object(), grace_seconds=grace, actor=Actor.from_request(request))
        return Response(s.minted_response(minted), status=status.HTTP_201_CREATED)
