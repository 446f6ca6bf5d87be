"""Routes of the fleet API (included by controlplane/api/urls.py)."""
from rest_framework.routers import SimpleRouter

from fleet.api.views import DeploymentViewSet

router = SimpleRouter()
router.trailing_slash = "/?"
router.register("deployments", DeploymentViewSet, basename="deployment")

urlpatterns = router.urls
