from django.contrib import admin

from fleet.models import Deployment, Instance


class ReadOnlyAdmin(admin.ModelAdmin):
    """Look, never touch: writes go through fleet.services (an instance row deleted here would orphan
    its engine; a deployment added here would skip validation, quotas and the audit trail)."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Deployment)
class DeploymentAdmin(ReadOnlyAdmin):
    list_display = ("name", "tenant", "model_version", "runtime_backend", "min_replicas", "max_replicas", "status")
    list_filter = ("runtime_backend", "status")


@admin.register(Instance)
class InstanceAdmin(ReadOnlyAdmin):
    list_display = ("pk", "deployment", "state", "endpoint_url", "restart_count", "last_health_ok")
    list_filter = ("state",)
