from django.urls import path
from rest_framework.routers import SimpleRouter

from audit.api import views

router = SimpleRouter()
router.trailing_slash = "/?"  # accept paths with and without the final slash
router.register("audit/events", views.AuditEventViewSet, basename="audit-event")

urlpatterns = [
    path("audit/export", views.AuditExportView.as_view(), name="audit-export"),
    path("audit/export/manifest", views.AuditExportManifestView.as_view(), name="audit-export-manifest"),
    path("audit/verify", views.AuditVerifyView.as_view(), name="audit-verify"),
] + router.urls
