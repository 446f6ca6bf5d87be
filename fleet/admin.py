from django.contrib import admin

from fleet.models import Deployment, Instance


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
    list_display = ("name", "tenant", "model_version", "runtime_backend", "min_replicas", "max_replicas", "status")
    list_filter = ("runtime_backend", "status")

    def has_change_permission(self, request, obj=None):  # writes go through fleet.services
        return False


@admin.register(Instance)
class InstanceAdmin(admin.ModelAdmin):
    list_display = ("pk", "deployment", "state", "endpoint_url", "restart_count", "last_health_ok")
    list_filter = ("state",)

    def has_change_permission(self, request, obj=None):
        return False
