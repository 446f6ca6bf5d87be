"""ASGI entry point for the gateway (`uvicorn gateway.asgi:application`); prefer `python -m gateway`."""
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django.setup()  # once, at import: the snapshot loader uses the ORM (in threads, off the request path)

from gateway.app import build_app  # noqa: E402  (needs the app registry)

application = build_app()
