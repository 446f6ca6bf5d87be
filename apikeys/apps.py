from django.apps import AppConfig


class ApiKeysConfig(AppConfig):
    name = "apikeys"
    verbose_name = "API keys"

    def ready(self):
        from apikeys import schema  # noqa: F401  (registers the OpenAPI auth extension)
