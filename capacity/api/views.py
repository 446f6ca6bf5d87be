"""/api/v1/capacity/: GPU types (platform admins edit), plans, and advice for a deployment from its live figures.

Reading GPU types follows the GPU prices' rule (READ_RULES["usage"]); planning needs the registry's
read rule (it reads model versions); a plan from usage history reads only what the caller may: a
tenant where they hold the usage rule, a deployment the fleet rule lets them see — another tenant's
is a 404, as a missing one. Advice is per deployment, under the fleet rule.
"""
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.actor import Actor
from capacity import selectors, services
from capacity.api import serializers as s
from capacity.models import GpuType
from controlplane.api.viewsets import ReadRuleMixin, TenantScopedViewSet
from fleet.models import Deployment
from fleet.permissions import readable_deployments
from tenants.access import has_perm, visible_tenants
from tenants.roles import READ_RULES, Resource


def _django_errors(call):
    try:
        return call()
    except DjangoValidationError as exc:
        raise ValidationError(exc.message_dict if hasattr(exc, "message_dict") else exc.messages) from None


class GpuTypeViewSet(ReadRuleMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """GPU types the planner sizes for; prices come from the GPU price table (/api/v1/usage/gpu-prices/)."""

    resource = Resource.USAGE
    serializer_class = s.GpuTypeSerializer
    queryset = GpuType.objects.all()
    lookup_value_regex = r"[0-9]+"
    pagination_class = None

    def _admin_only(self) -> None:
        if not self.principal.is_platform_admin:
            raise PermissionDenied("Only platform admins edit GPU types.")

    def _valid(self, partial: bool = False) -> dict:
        payload = s.GpuTypeWriteSerializer(data=self.request.data, partial=partial)
        payload.is_valid(raise_exception=True)
        return payload.validated_data

    @extend_schema(request=s.GpuTypeWriteSerializer, responses={201: s.GpuTypeSerializer})
    def create(self, request):
        self._admin_only()
        data = self._valid()
        gpu_type = _django_errors(lambda: services.create_gpu_type(actor=Actor.from_request(request), **data))
        return Response(s.GpuTypeSerializer(gpu_type).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.GpuTypeWriteSerializer, responses=s.GpuTypeSerializer)
    def partial_update(self, request, pk=None):
        gpu_type = self.get_object()
        self._admin_only()
        data = self._valid(partial=True)
        gpu_type = _django_errors(lambda: services.update_gpu_type(gpu_type, actor=Actor.from_request(request),
                                                                   **data))
        return Response(s.GpuTypeSerializer(gpu_type).data)

    @extend_schema(request=None, responses={204: None})
    def destroy(self, request, pk=None):
        gpu_type = self.get_object()
        self._admin_only()
        services.delete_gpu_type(gpu_type, actor=Actor.from_request(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


def traffic_scope(principal, data: dict) -> selectors.TrafficScope | None:
    """Whose usage a plan may read: the named tenant or deployment if the caller may read it (else 404)."""
    if data.get("traffic") != "usage":
        return None
    usage_perms = READ_RULES[Resource.USAGE]
    if data.get("deployment") is not None:
        deployment = readable_deployments(principal).filter(pk=data["deployment"]).first()
        if deployment is None or not (principal.is_platform_admin or any(
                has_perm(principal, deployment.tenant, perm) for perm in usage_perms)):
            raise Http404("No such deployment.")
        return selectors.TrafficScope(label=f"deployment {deployment}", deployment=deployment)
    if data.get("tenant"):
        tenant = visible_tenants(principal).filter(slug=data["tenant"]).first()
        if tenant is None or not any(has_perm(principal, tenant, perm) for perm in usage_perms):
            raise Http404("No such tenant.")
        return selectors.TrafficScope(label=f"tenant {tenant.slug}", tenant_ids=[tenant.pk])
    if not principal.is_platform_admin:
        raise ValidationError({"tenant": "Name the tenant (or deployment) whose usage to plan from."})
    return selectors.TrafficScope(label="the whole install")


class PlanView(ReadRuleMixin, APIView):
    """POST a plan's inputs, get the plan: KV cache per token and per GPU, vLLM settings, replicas, cost."""

    resource = Resource.REGISTRY

    @extend_schema(request=s.PlanRequestSerializer, responses=s.PlanSerializer)
    def post(self, request):
        payload = s.PlanRequestSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = dict(payload.validated_data)
        if "gpu_type" in data:
            data["gpu_type"] = _django_errors(lambda: selectors.gpu_type_named(data["gpu_type"]))
        scope = traffic_scope(self.principal, data)
        document = _django_errors(lambda: selectors.make_plan(data, scope=scope))
        return Response(s.PlanSerializer(document).data)


class AdviceViewSet(TenantScopedViewSet, mixins.RetrieveModelMixin):
    """Advice for one deployment from its last 15 minutes of demand samples and its engines' cache counters."""

    resource = Resource.DEPLOYMENTS
    queryset = Deployment.objects.select_related("tenant", "model_version__model")
    serializer_class = s.AdviceSerializer
    lookup_value_regex = r"[0-9]+"

    @extend_schema(responses=s.AdviceSerializer)
    def retrieve(self, request, pk=None):
        return Response(s.AdviceSerializer(selectors.deployment_advice(self.get_object())).data)
