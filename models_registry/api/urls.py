"""/api/v1/models/ and /api/v1/models/{id}/versions/."""
from rest_framework.routers import SimpleRouter

from models_registry.api import views

router = SimpleRouter()
router.trailing_slash = "/?"  # accept paths with and without the final slash
router.register("models", views.ModelViewSet, basename="model")
router.register(r"models/(?P<model_pk>[0-9]+)/versions", views.ModelVersionViewSet, basename="model-version")

urlpatterns = router.urls
