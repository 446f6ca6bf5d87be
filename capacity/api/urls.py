"""Routes of the capacity API (included under /api/v1/capacity/ by controlplane/api/urls.py)."""
from django.urls import re_path
from rest_framework.routers import SimpleRouter

from capacity.api.views import AdviceViewSet, GpuTypeViewSet, PlanView

router = SimpleRouter()
router.trailing_slash = "/?"
router.register("gpu-types", GpuTypeViewSet, basename="gpu-type")
router.register("advice", AdviceViewSet, basename="capacity-advice")

urlpatterns = router.urls + [re_path(r"^plans/?$", PlanView.as_view(), name="capacity-plans")]
