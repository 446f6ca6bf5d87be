"""Routes of the rollouts API (included by controlplane/api/urls.py)."""
from rest_framework.routers import SimpleRouter

from rollouts.api.views import RolloutViewSet

router = SimpleRouter()
router.trailing_slash = "/?"
router.register("rollouts", RolloutViewSet, basename="rollout")

urlpatterns = router.urls
