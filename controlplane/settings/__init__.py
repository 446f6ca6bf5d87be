"""Switchyard settings: every value from the environment (see docs/operations.md), one module per concern.

Defaults give the embedded single-machine setup: SQLite and generated secrets in var/, a
local-memory cache and a filesystem Celery broker, so nothing but Python is needed.
`DJANGO_SETTINGS_MODULE=controlplane.settings` names this package, which gathers the modules below;
a module that needs another's value (BASE_DIR, VAR_DIR, REDIS_URL, DATABASES) imports it by name.
"""
from controlplane.settings.api import *  # noqa: F403
from controlplane.settings.base import *  # noqa: F403
from controlplane.settings.data_stores import *  # noqa: F403
from controlplane.settings.fleet import *  # noqa: F403
from controlplane.settings.gateway import *  # noqa: F403
from controlplane.settings.identity import *  # noqa: F403
from controlplane.settings.keys_and_audit import *  # noqa: F403
from controlplane.settings.logging import *  # noqa: F403
from controlplane.settings.security import *  # noqa: F403
from controlplane.settings.task_queue import *  # noqa: F403
from controlplane.settings.usage import *  # noqa: F403
