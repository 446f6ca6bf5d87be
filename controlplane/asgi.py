"""ASGI entry point: the console and REST API served by uvicorn.

Static files (console CSS/JS, Swagger UI) are served by the same process through WhiteNoise
(controlplane.middleware.StaticFilesMiddleware) from what `manage.py collectstatic` wrote to STATIC_ROOT,
so the embedded install needs no web server in front and nothing from a CDN.
"""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

application = get_asgi_application()
