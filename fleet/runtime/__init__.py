"""Runtime backends by name, as settings.SWITCHYARD_RUNTIME_BACKENDS lists them (docs/runtime-backends.md).

`get_backend(name)` builds the named class with its options once per process (a backend may hold a
client, e.g. the Kubernetes API's) and again after the setting changes (tests override it).
"""
from functools import cache
from importlib import import_module

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from fleet.runtime.base import Launched, NoCapacity, RuntimeBackend

__all__ = ["Launched", "NoCapacity", "RuntimeBackend", "backend_choices", "backend_class", "backend_names",
           "get_backend"]


def backend_names() -> list[str]:
    """Every configured backend's name, in the setting's order."""
    return list(settings.SWITCHYARD_RUNTIME_BACKENDS)


def backend_choices() -> list[tuple[str, str]]:
    """(name, label) of every configured backend: the choices of Deployment.runtime_backend."""
    return [(name, entry["label"]) for name, entry in settings.SWITCHYARD_RUNTIME_BACKENDS.items()]


def backend_class(name: str) -> type[RuntimeBackend]:
    """The class configured for `name`; KeyError names an unknown backend, ImportError a bad path."""
    try:
        dotted = settings.SWITCHYARD_RUNTIME_BACKENDS[name]["class"]
    except KeyError:
        raise KeyError(f"unknown runtime backend {name!r}") from None
    module, cls = dotted.rsplit(".", 1)
    found = getattr(import_module(module), cls, None)
    if not (isinstance(found, type) and issubclass(found, RuntimeBackend)):
        raise ImportError(f"{dotted} is not a RuntimeBackend class")
    return found


@cache
def get_backend(name: str) -> RuntimeBackend:
    """The backend instance for `name`, built with its configured options and told its name."""
    backend = backend_class(name)(**settings.SWITCHYARD_RUNTIME_BACKENDS[name]["options"])
    backend.name = name
    return backend


@receiver(setting_changed)
def _forget_backends(*, setting, **kwargs):
    if setting == "SWITCHYARD_RUNTIME_BACKENDS":
        get_backend.cache_clear()
