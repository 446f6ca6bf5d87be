"""Top-level routes. Public without credentials (docs/api.md): /healthz, /api/schema/, /api/docs/,
/console/login/ and static files. Everything else answers 401/403 (API, SCIM) or redirects to login (HTML)."""
from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from console.views.auth import admin_password_change
from sso import scim, scim_discovery


def healthz(request):
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("api/v1/", include("controlplane.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="swagger-ui"),
    path("console/", include("console.urls")),
    # SCIM 2.0 for identity providers (docs/sso.md): each provider's own bearer token, never a session.
    path("scim/v2/Users", scim.users, name="scim-users"),
    path("scim/v2/Users/<int:pk>", scim.user, name="scim-user"),
    path("scim/v2/Groups", scim.groups, name="scim-groups"),
    path("scim/v2/Groups/<int:pk>", scim.group, name="scim-group"),
    path("scim/v2/ServiceProviderConfig", scim_discovery.service_provider_config, name="scim-spc"),
    path("scim/v2/ResourceTypes", scim_discovery.resource_types, name="scim-resource-types"),
    path("scim/v2/ResourceTypes/<str:name>", scim_discovery.resource_type, name="scim-resource-type"),
    path("scim/v2/Schemas", scim_discovery.schemas, name="scim-schemas"),
    path("scim/v2/Schemas/<str:schema_id>", scim_discovery.schema, name="scim-schema"),
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
