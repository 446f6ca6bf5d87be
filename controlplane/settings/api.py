"""The REST API (Django REST framework) and its OpenAPI schema (drf-spectacular)."""

# --- REST API ---
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apikeys.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["controlplane.api.permissions.AdminApiAccess"],
    "DEFAULT_PAGINATION_CLASS": "controlplane.api.pagination.CappedPageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "controlplane.api.schema.SwitchyardAutoSchema",
    "EXCEPTION_HANDLER": "controlplane.api.exceptions.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    # `?format=csv|jsonl` belongs to the audit export, not to DRF's renderer override.
    "URL_FORMAT_OVERRIDE": None,
    # ASCII JSON (non-ASCII as \u escapes): an error message that quotes the input ("\ud800" is not a valid
    # choice) must render even when the input held an unpaired surrogate, which UTF-8 cannot encode.
    "UNICODE_JSON": False,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Switchyard control plane API",
    "DESCRIPTION": "Tenants, members, API keys, quotas and the audit trail. See docs/api.md.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Every operation's error responses refer to these two bodies (controlplane/api/schema.py).
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "controlplane.api.schema.add_error_components"],
    "ENUM_NAME_OVERRIDES": {"KeyStateEnum": "apikeys.api.serializers.KEY_STATES",
                            "InstanceRoleEnum": "fleet.models.InstanceRole", "RoleEnum": "tenants.roles.Role",
                            "TenantStatusEnum": "tenants.models.TenantStatus"},
}
