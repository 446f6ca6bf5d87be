"""Quota policies of one tenant."""
import django_filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response

from apikeys.models import ApiKey
from audit.actor import Actor
from controlplane.api.schema import BAD_REQUEST
from controlplane.api.viewsets import TenantChildViewSet
from quotas import services
from quotas.api.serializers import QuotaPolicySerializer, QuotaPolicyUpdateSerializer
from quotas.models import CAPACITY_FIELDS, QuotaPolicy
from tenants.roles import Perm, Resource

SUBJECT_FIELDS = ("api_key_id", "user_id")


class QuotaPolicyFilter(django_filters.FilterSet):
    """Plain id filters: a model-choice filter would answer "not a valid choice" for ids that do not
    exist anywhere but not for another tenant's ids, telling a caller which ids exist elsewhere."""

    api_key = django_filters.NumberFilter(field_name="api_key_id", min_value=1, max_value=2**63 - 1)
    user = django_filters.NumberFilter(field_name="user_id", min_value=1, max_value=2**63 - 1)


class QuotaPolicyViewSet(TenantChildViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    queryset = QuotaPolicy.objects.select_related("api_key", "user")
    serializer_class = QuotaPolicySerializer
    resource = Resource.QUOTAS
    write_perms = (Perm.MANAGE_QUOTAS,)
    filterset_class = QuotaPolicyFilter

    def create(self, request, tenant_slug=None):
        serializer = QuotaPolicySerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        limits = dict(serializer.validated_data)
        self._require_platform_admin_for_capacity(limits)
        subject = {"api_key": self._key(limits.pop("api_key_id", None)),
                   "user": self.tenant_member(limits.pop("user_id", None))}
        if subject["api_key"] is None and subject["user"] is None:
            raise ValidationError({"api_key_id": "The tenant-wide policy exists already; "
                                                 "narrow this one to a key or a user."})
        policy = services.create_quota_policy(tenant=self.get_tenant(), actor=Actor.from_request(request), **subject,
                                              **limits)
        return Response(QuotaPolicySerializer(policy).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=QuotaPolicyUpdateSerializer, responses=QuotaPolicySerializer)
    def partial_update(self, request, tenant_slug=None, pk=None):
        policy = self.get_object()
        serializer = QuotaPolicyUpdateSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        limits = {k: v for k, v in serializer.validated_data.items() if k not in SUBJECT_FIELDS}
        self._require_platform_admin_for_capacity(limits)
        policy = services.update_quota_policy(policy, actor=Actor.from_request(request), **limits)
        return Response(QuotaPolicySerializer(policy).data)

    @extend_schema(responses={204: None, 400: BAD_REQUEST})  # 400: the tenant-wide policy cannot be deleted
    def destroy(self, request, tenant_slug=None, pk=None):
        services.delete_quota_policy(self.get_object(), actor=Actor.from_request(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _require_platform_admin_for_capacity(self, limits: dict) -> None:
        """A tenant's capacity is the platform's to hand out: its own admins may read it, not raise it."""
        if any(name in limits for name in CAPACITY_FIELDS) and not self.principal.is_platform_admin:
            raise PermissionDenied("Only platform admins set a tenant's capacity quota (max_instances, max_gpus).")

    def _key(self, key_id):
        if key_id is None:
            return None
        key = ApiKey.objects.filter(tenant=self.get_tenant(), pk=key_id).first()
        if key is None:
            raise ValidationError({"api_key_id": "No such key in this tenant."})
        return key
