"""Top-level routes. Public without credentials (docs/api.md): /healthz, /api/schema/, /api/docs/,
/console/login/ and static files. Everything else answers 401/403 (API) or redirects to login (HTML)."""
from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from console.views.auth import admin_password_change


def healthz(request):
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("api/v1/", include("controlplane.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="swagger-ui"),
    path("console/", include("console.urls")),
    # One sign-in page for everyone: the admin's own form would be a second, unthrottled one.
    path("admin/login/", RedirectView.as_view(pattern_name="console:login", query_string=True)),
    # The admin's password change checks the old password: the sign-in page's limits apply there too.
    path("admin/password_change/", admin_password_change),
    path("admin/", admin.site.urls),
]

# JSON errors for /api/ requests that never reach a DRF view; HTML pages elsewhere (controlplane.api.exceptions).
handler400 = "controlplane.api.exceptions.bad_request"
handler404 = "controlplane.api.exceptions.page_not_found"
handler500 = "controlplane.api.exceptions.server_error"
