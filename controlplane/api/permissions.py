"""Default permission for the admin REST API."""
from rest_framework.permissions import BasePermission

from apikeys.models import ApiKey
from apikeys.scopes import ADMIN_API_SCOPES


class AdminApiAccess(BasePermission):
    """An authenticated, active caller; an API key must carry an admin-API scope."""

    message = "This API key has no admin or audit:read scope."

    def has_permission(self, request, view):
        user = request.user
        if not (user and user.is_authenticated):
            return False
        if isinstance(request.auth, ApiKey):
            return bool(set(request.auth.scopes) & ADMIN_API_SCOPES)
        return user.is_active
