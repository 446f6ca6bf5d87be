"""/api/v1/rollouts/: who may read a deployment reads its rollouts; who may manage it starts and steers them.

Reading is the base viewset's rule for deployments (READ_RULES["deployments"]): a rollout of a tenant
where the caller may not read the fleet is a 404. Writing needs MANAGE_FLEET in the deployment's tenant,
or platform admin (shared pools: platform only), as for deployments.
"""
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response

from audit.actor import Actor
from controlplane.api.schema import BAD_REQUEST
from controlplane.api.viewsets import TenantScopedViewSet
from fleet.permissions import can_manage_deployments, readable_deployments
from rollouts import services
from rollouts.api import serializers as s
from rollouts.models import Rollout
from tenants.roles import Resource

STATE_CHANGE = {200: s.RolloutSerializer, 400: BAD_REQUEST}  # 400: not possible in the rollout's state


class RolloutViewSet(TenantScopedViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Rollouts of deployments between model versions (docs/rollouts.md), newest first."""

    resource = Resource.DEPLOYMENTS
    tenant_field = "deployment__tenant"
    queryset = Rollout.objects.select_related("deployment__tenant", "from_version", "to_version")
    serializer_class = s.RolloutSerializer
    lookup_value_regex = r"[0-9]+"
    # `deployment` is filtered by hand: django-filter would answer another tenant's id differently from a missing one.
    filterset_fields = ["state", "strategy"]

    def base_queryset(self):
        rollouts = self.queryset.all()
        deployment = self.request.query_params.get("deployment") if self.request else None
        if deployment is None:
            return rollouts
        if not deployment.isdigit():
            raise ValidationError({"deployment": "A deployment id."})
        return rollouts.filter(deployment_id=int(deployment))

    @extend_schema(parameters=[OpenApiParameter("deployment", int, description="Only this deployment's rollouts.")])
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=s.RolloutCreateSerializer, responses={201: s.RolloutSerializer})
    def create(self, request):
        data = self._valid(s.RolloutCreateSerializer)
        deployment = readable_deployments(self.principal).select_related("tenant").filter(pk=data["deployment"]).first()
        if deployment is None:
            raise ValidationError({"deployment": "No such deployment."})
        self._require_manage(deployment.tenant)
        rollout = services.start_rollout(
            deployment, to_version=self._version(data["to_version"]), actor=self._actor(),
            strategy=data["strategy"], stages=data.get("stages"), gates=data.get("gates"),
            sticky_by=data["sticky_by"], grace_seconds=data["grace_seconds"])
        return Response(self._out(rollout), status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=STATE_CHANGE)
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        return Response(self._out(services.pause_rollout(self._writable(), actor=self._actor())))

    @extend_schema(request=None, responses=STATE_CHANGE)
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        return Response(self._out(services.resume_rollout(self._writable(), actor=self._actor())))

    @extend_schema(request=None, responses=STATE_CHANGE)
    @action(detail=True, methods=["post"])
    def promote(self, request, pk=None):
        """Promote now: all traffic to the new version, whatever the gates say."""
        return Response(self._out(services.promote_rollout(self._writable(), actor=self._actor())))

    @extend_schema(request=s.RollbackSerializer, responses=STATE_CHANGE)
    @action(detail=True, methods=["post"], url_path="roll-back")
    def roll_back(self, request, pk=None):
        """Traffic back to the old version; on a promoted rollout, the reverse rollout it starts is returned."""
        reason = self._valid(s.RollbackSerializer).get("reason", "")
        rollout = services.roll_back_rollout(self._writable(), actor=self._actor(), reason=reason)
        return Response(self._out(rollout))

    def _writable(self) -> Rollout:
        rollout = self.get_object()
        self._require_manage(rollout.deployment.tenant)
        return rollout

    def _require_manage(self, tenant) -> None:
        if can_manage_deployments(self.principal, tenant):
            return
        if tenant is None:
            raise PermissionDenied("Only platform admins roll out shared pools.")
        raise PermissionDenied("Rolling out needs the owner or admin role in this tenant.")

    @staticmethod
    def _version(pk: int):
        from models_registry.models import ModelVersion

        version = ModelVersion.objects.select_related("model").filter(pk=pk).first()
        if version is None:
            raise ValidationError({"to_version": "No such model version."})
        return version

    def _out(self, rollout: Rollout) -> dict:
        return s.RolloutSerializer(self.queryset.get(pk=rollout.pk), context=self.get_serializer_context()).data

    def _actor(self) -> Actor:
        return Actor.from_request(self.request)

    def _valid(self, serializer_class) -> dict:
        serializer = serializer_class(data=self.request.data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)
