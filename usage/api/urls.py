"""/api/v1/usage/…"""
from django.urls import re_path
from rest_framework.routers import SimpleRouter

from usage.api.views import BudgetStateView, GpuPriceViewSet, UsageBreakdownView, UsageCostView, UsageSeriesView

router = SimpleRouter()
router.trailing_slash = "/?"
router.register("gpu-prices", GpuPriceViewSet, basename="gpu-price")

urlpatterns = [
    re_path(r"^series/?$", UsageSeriesView.as_view(), name="usage-series"),
    re_path(r"^breakdown/?$", UsageBreakdownView.as_view(), name="usage-breakdown"),
    re_path(r"^costs/?$", UsageCostView.as_view(), name="usage-costs"),
    re_path(r"^budgets/?$", BudgetStateView.as_view(), name="usage-budgets"),
    *router.urls,
]
