from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit trail"

    def ready(self):
        from audit import auth_events  # noqa: F401  (connects Django's login signals)
