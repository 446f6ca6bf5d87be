"""/api/v1/: every endpoint of the admin REST API."""
from django.urls import include, path
from rest_framework.routers import SimpleRouter

from apikeys.api.views import ApiKeyViewSet, PlatformKeyViewSet
from quotas.api.views import QuotaPolicyViewSet
from tenants.api.object_grants import DeploymentGrantViewSet
from tenants.api.views import GrantViewSet, InvitationViewSet, MembershipViewSet, TenantViewSet

router = SimpleRouter()
router.trailing_slash = "/?"  # accept paths with and without the final slash
router.register("tenants", TenantViewSet, basename="tenant")
router.register("platform/keys", PlatformKeyViewSet, basename="platform-key")
router.register(r"tenants/(?P<tenant_slug>[a-z0-9-]+)/members", MembershipViewSet, basename="member")
router.register(r"tenants/(?P<tenant_slug>[a-z0-9-]+)/invitations", InvitationViewSet, basename="invitation")
router.register(r"tenants/(?P<tenant_slug>[a-z0-9-]+)/grants", GrantViewSet, basename="grant")
router.register(r"tenants/(?P<tenant_slug>[a-z0-9-]+)/keys", ApiKeyViewSet, basename="api-key")
router.register(r"tenants/(?P<tenant_slug>[a-z0-9-]+)/quotas", QuotaPolicyViewSet, basename="quota")
router.register(r"deployments/(?P<deployment_pk>[0-9]+)/grants", DeploymentGrantViewSet, basename="deployment-grant")

urlpatterns = router.urls + [path("", include("audit.api.urls")), path("", include("fleet.api.urls")),
                              path("", include("rollouts.api.urls")),
                              path("", include("models_registry.api.urls")), path("usage/", include("usage.api.urls")),
                              path("capacity/", include("capacity.api.urls"))]
