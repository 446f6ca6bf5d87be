"""Describes API key authentication in the OpenAPI schema (Swagger's Authorize button)."""
from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "apikeys.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "sy_<env>_…",
                "description": "A Switchyard API key with the admin or audit:read scope."}
