"""The model registry over REST: members who may read it (READ_RULES["registry"]) read, platform admins write."""
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from audit.actor import Actor
from controlplane.api.schema import BAD_REQUEST
from controlplane.api.viewsets import ReadRuleMixin
from models_registry import services
from models_registry.api import serializers as s
from models_registry.models import Model, ModelVersion
from tenants.roles import Resource

READ_ACTIONS = ("list", "retrieve")


class RegistryViewSet(ReadRuleMixin, viewsets.GenericViewSet):
    """The registry is global: members who work with the fleet see what they can deploy (not auditors)."""

    resource = Resource.REGISTRY
    lookup_value_regex = r"[0-9]+"

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication first: anonymous → 401
        if self.action not in READ_ACTIONS and not self.principal.is_platform_admin:
            raise PermissionDenied("Only platform admins may change the model registry.")

    def valid(self, serializer_class) -> dict:
        serializer = serializer_class(data=self.request.data)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data

    @property
    def actor(self) -> Actor:
        return Actor.from_request(self.request)


class ModelViewSet(RegistryViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    queryset = Model.objects.all()
    serializer_class = s.ModelSerializer
    filterset_fields = ["family"]

    @extend_schema(request=s.ModelCreateSerializer, responses={201: s.ModelSerializer})
    def create(self, request):
        model = services.register_model(**self.valid(s.ModelCreateSerializer), actor=self.actor)
        return Response(s.ModelSerializer(model).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.ModelUpdateSerializer, responses=s.ModelSerializer)
    def partial_update(self, request, pk=None):
        model = services.update_model(self.get_object(), **self.valid(s.ModelUpdateSerializer), actor=self.actor)
        return Response(s.ModelSerializer(model).data)


class ModelVersionViewSet(RegistryViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Versions of one model (/models/{model_pk}/versions/)."""

    queryset = ModelVersion.objects.select_related("model")
    serializer_class = s.ModelVersionSerializer
    filterset_fields = ["status", "quantization"]

    def get_model(self) -> Model:
        if not hasattr(self, "_model"):
            self._model = get_object_or_404(Model, pk=self.kwargs["model_pk"])
        return self._model

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # OpenAPI generation has no model
            return self.queryset.none()
        return self.queryset.filter(model=self.get_model()).order_by("-created_at", "-id")

    @extend_schema(request=s.ModelVersionCreateSerializer, responses={201: s.ModelVersionSerializer})
    def create(self, request, model_pk=None):
        fields = self.valid(s.ModelVersionCreateSerializer)
        version = services.create_version(model=self.get_model(), **fields, actor=self.actor)
        return Response(self.get_serializer(version).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.ModelVersionUpdateSerializer, responses=s.ModelVersionSerializer)
    def partial_update(self, request, model_pk=None, pk=None):
        fields = self.valid(s.ModelVersionUpdateSerializer)
        version = services.update_draft_version(self.get_object(), **fields, actor=self.actor)
        return Response(self.get_serializer(version).data)

    @extend_schema(request=None, responses={200: s.ModelVersionSerializer, 400: BAD_REQUEST})  # 400: wrong status
    @action(detail=True, methods=["post"])
    def publish(self, request, model_pk=None, pk=None):
        return self._lifecycle(services.publish_version)

    @extend_schema(request=None, responses={200: s.ModelVersionSerializer, 400: BAD_REQUEST})  # 400: wrong status
    @action(detail=True, methods=["post"])
    def deprecate(self, request, model_pk=None, pk=None):
        return self._lifecycle(services.deprecate_version)

    @extend_schema(request=None, responses={200: s.ModelVersionSerializer, 400: BAD_REQUEST})  # 400: wrong status
    @action(detail=True, methods=["post"])
    def retire(self, request, model_pk=None, pk=None):
        return self._lifecycle(services.retire_version)

    def _lifecycle(self, service):
        version = service(self.get_object(), actor=self.actor)
        return Response(self.get_serializer(version).data)
