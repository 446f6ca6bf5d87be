"""Logging: JSON lines on standard error, each carrying the request id."""
from controlplane.env import env_choice
from controlplane.settings.data_stores import REDIS_URL

LOG_LEVEL = env_choice("LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "controlplane.logging.RequestIdFilter"}},
    "formatters": {"json": {"()": "controlplane.logging.JsonFormatter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "json", "filters": ["request_id"]},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # The filesystem broker has no host; kombu warns about that on every connection.
        "kombu.connection": {"level": "WARNING" if REDIS_URL else "ERROR"},
    },
}
