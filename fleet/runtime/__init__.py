"""Runtime backends by name: `get_backend("local" | "simulator")` (kubernetes slots in here later)."""
from importlib import import_module

from fleet.runtime.base import Launched, RuntimeBackend

BACKENDS = {
    "local": "fleet.runtime.local.LocalBackend",
    "simulator": "fleet.runtime.simulator.SimulatorBackend",
}

__all__ = ["BACKENDS", "Launched", "RuntimeBackend", "get_backend"]


def get_backend(name: str) -> RuntimeBackend:
    """A backend instance for `name`; KeyError names the unknown backend."""
    try:
        dotted = BACKENDS[name]
    except KeyError:
        raise KeyError(f"unknown runtime backend {name!r}") from None
    module, cls = dotted.rsplit(".", 1)
    return getattr(import_module(module), cls)()
