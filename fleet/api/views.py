"""/api/v1/deployments/: tenant admins manage their tenant's deployments, platform admins all and shared pools.

Reading is the base viewset's rule (READ_RULES["deployments"]: a deployment of a tenant where the caller
may not read the fleet is a 404), engine internals need VIEW_FLEET_INTERNALS (InstanceSerializer);
writing needs MANAGE_FLEET in the deployment's tenant, or platform admin. Shared pools are platform-only.
"""
from datetime import timedelta

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.generics import get_object_or_404
from rest_framework.response import Response

from audit.actor import Actor
from controlplane.api.schema import conflict
from controlplane.api.viewsets import TenantScopedViewSet
from fleet import services
from fleet.api import serializers as s
from fleet.models import Deployment, ScalingPolicy
from fleet.permissions import (
    can_manage_deployments,
    can_operate_deployment,
    readable_deployments,
    reads_fleet_somewhere,
)
from fleet.states import InvalidTransition
from tenants.access import visible_tenants
from tenants.roles import Resource

INSTANCE_ACTION = r"instances/(?P<instance_id>[0-9]+)"
INVALID_TRANSITION = conflict("The instance cannot be drained or restarted in its current state.")


class DeploymentViewSet(TenantScopedViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Deployments (desired state) with their instances (observed state)."""

    resource = Resource.DEPLOYMENTS
    queryset = Deployment.objects.select_related("tenant", "model_version__model").prefetch_related("instances")
    serializer_class = s.DeploymentSerializer
    lookup_value_regex = r"[0-9]+"
    filterset_fields = ["runtime_backend", "status", "region"]

    def base_queryset(self):
        return self.queryset.order_by("pk")

    def get_queryset(self):
        """The tenant-wide read rule, plus deployments granted one by one (fleet.permissions)."""
        if getattr(self, "swagger_fake_view", False):
            return self.queryset.none()
        return self.base_queryset().filter(pk__in=readable_deployments(self.principal).values("pk"))

    def reads_somewhere(self) -> bool:
        return reads_fleet_somewhere(self.principal)

    @extend_schema(request=s.DeploymentCreateSerializer, responses={201: s.DeploymentSerializer})
    def create(self, request):
        data = self._valid(s.DeploymentCreateSerializer)
        tenant = self._tenant_for(data.pop("tenant", None))
        self._require_manage(tenant)
        version = self._model_version(data.pop("model_version"))
        deployment = services.create_deployment(tenant=tenant, model_version=version, actor=self._actor(), **data)
        return Response(self._out(deployment), status=status.HTTP_201_CREATED)

    @extend_schema(request=s.ScaleSerializer, responses=s.DeploymentSerializer)
    @action(detail=True, methods=["post"])
    def scale(self, request, pk=None):
        deployment = self._writable()
        deployment = services.scale_deployment(deployment, actor=self._actor(), **self._valid(s.ScaleSerializer))
        return Response(self._out(deployment))

    @extend_schema(request=None, responses={202: s.DeploymentSerializer})
    def destroy(self, request, pk=None):
        deployment = self.get_object()
        self._require_manage(deployment.tenant)  # deleting is the tenant's call: no per-object grant allows it
        deployment = services.delete_deployment(deployment, actor=self._actor())
        return Response(self._out(deployment), status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={202: s.InstanceSerializer, 409: INVALID_TRANSITION})
    @action(detail=True, methods=["post"], url_path=INSTANCE_ACTION + "/drain")
    def drain(self, request, pk=None, instance_id=None):
        return self._instance_action(services.drain_instance, instance_id)

    @extend_schema(request=None, responses={202: s.InstanceSerializer, 409: INVALID_TRANSITION})
    @action(detail=True, methods=["post"], url_path=INSTANCE_ACTION + "/restart")
    def restart(self, request, pk=None, instance_id=None):
        return self._instance_action(services.restart_instance, instance_id)

    @extend_schema(methods=["GET"], responses=s.ScalingPolicySerializer)
    @extend_schema(methods=["PUT"], request=s.ScalingPolicySerializer, responses=s.ScalingPolicySerializer)
    @action(detail=True, methods=["get", "put"])
    def scaling(self, request, pk=None):
        """The deployment's autoscaling policy (defaults, disabled, until one is set)."""
        if request.method == "GET":
            deployment = self.get_object()
            policy = getattr(deployment, "scaling", None) or ScalingPolicy(deployment=deployment, enabled=False)
            return Response(s.ScalingPolicySerializer(policy).data)
        deployment = self._writable()
        fields = self._valid(s.ScalingPolicySerializer)
        policy = services.set_scaling_policy(deployment, actor=self._actor(), **fields)
        return Response(s.ScalingPolicySerializer(policy).data)

    @extend_schema(methods=["GET"], responses=s.RoutingSerializer)
    @extend_schema(methods=["PUT"], request=s.RoutingSerializer, responses=s.RoutingSerializer)
    @action(detail=True, methods=["get", "put"])
    def routing(self, request, pk=None):
        """How the gateway picks one of the deployment's engines; a change reaches every gateway within a second."""
        if request.method == "GET":
            return Response({"routing_policy": self.get_object().routing_policy})
        deployment = services.set_routing_policy(self._writable(), actor=self._actor(),
                                                 **self._valid(s.RoutingSerializer))
        return Response({"routing_policy": deployment.routing_policy})

    @extend_schema(responses=s.ScalingDecisionSerializer(many=True))
    @action(detail=True, methods=["get"], url_path="scaling/decisions", pagination_class=None)
    def scaling_decisions(self, request, pk=None):
        """The last 200 changes of the serving size, newest first, with the rule and figures behind each."""
        decisions = self.get_object().scaling_decisions.order_by("-decided_at")[:200]
        return Response(s.ScalingDecisionSerializer(decisions, many=True).data)

    @extend_schema(responses=s.DemandSampleSerializer(many=True))
    @action(detail=True, methods=["get"], url_path="scaling/samples", pagination_class=None)
    def scaling_samples(self, request, pk=None):
        """Demand and size over the last hour (one sample per autoscale pass), oldest first."""
        since = timezone.now() - timedelta(hours=1)
        samples = self.get_object().demand_samples.filter(at__gte=since).order_by("at")[:1000]
        return Response(s.DemandSampleSerializer(samples, many=True).data)

    def _instance_action(self, service, instance_id):
        instance = get_object_or_404(self._writable().instances, pk=instance_id)
        try:
            instance = service(instance, actor=self._actor())
        except InvalidTransition as exc:
            return Response({"detail": f"{exc}."}, status=status.HTTP_409_CONFLICT)
        return Response(s.InstanceSerializer(instance, context=self.get_serializer_context()).data,
                        status=status.HTTP_202_ACCEPTED)

    def _writable(self) -> Deployment:
        """The deployment to operate: who manages its tenant's fleet, or holds `change_deployment` on it."""
        deployment = self.get_object()
        if not can_operate_deployment(self.principal, deployment):
            self._require_manage(deployment.tenant)  # raises, with the reason
        return deployment

    def _require_manage(self, tenant) -> None:
        """Platform admins manage everything; a tenant's owners and admins manage its dedicated deployments."""
        if can_manage_deployments(self.principal, tenant):
            return
        if tenant is None:
            raise PermissionDenied("Only platform admins manage shared pools.")
        raise PermissionDenied("Managing deployments needs the owner or admin role in this tenant.")

    def _tenant_for(self, slug):
        if slug is None:
            return None
        tenant = visible_tenants(self.principal).filter(slug=slug).first()
        if tenant is None:
            raise ValidationError({"tenant": "No such tenant."})
        return tenant

    def _model_version(self, pk):
        from models_registry.models import ModelVersion

        version = ModelVersion.objects.select_related("model").filter(pk=pk).first()
        if version is None:
            raise ValidationError({"model_version": "No such model version."})
        return version

    def _out(self, deployment) -> dict:
        return s.DeploymentSerializer(self.get_queryset().filter(pk=deployment.pk).first() or deployment,
                                      context=self.get_serializer_context()).data

    def _actor(self) -> Actor:
        return Actor.from_request(self.request)

    def _valid(self, serializer_class) -> dict:
        serializer = serializer_class(data=self.request.data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)
