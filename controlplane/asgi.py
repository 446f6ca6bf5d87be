"""ASGI entry point: the console and REST API served by uvicorn.

Static files (console CSS/JS, Swagger UI) are served by the same process, so the embedded
install needs no web server in front and nothing from a CDN.
"""
import os

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

application = ASGIStaticFilesHandler(get_asgi_application())
