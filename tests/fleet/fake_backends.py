"""In-memory runtime backends for the seam tests: they record every call, and run nothing.

Configured through settings.SWITCHYARD_RUNTIME_BACKENDS like any backend (by dotted path, with
options), so the tests exercise the real registry. State lives in BOOKS, keyed by backend name.
"""
import threading
from collections import defaultdict

from fleet.runtime.base import Launched, RuntimeBackend

BOOKS: dict[str, dict] = defaultdict(lambda: {"running": {}, "stopped_orphans": [], "stopped": [], "started": []})


class RecordingBackend(RuntimeBackend):
    """Engines that exist only in BOOKS[name]["running"]; `on_start` runs inside start() when given."""

    on_start = None  # a callable(instance), set by a test
    probed_by_fleet = False

    def __init__(self, region: str = "", port_base: int = 1):
        self.region, self.port_base = region, port_base
        self.lock = threading.Lock()

    @property
    def book(self) -> dict:
        return BOOKS[self.name]

    def start(self, instance) -> Launched:
        if type(self).on_start is not None:
            type(self).on_start(instance)
        with self.lock:
            self.book["started"].append(instance.pk)
            self.book["running"][instance.pk] = {"port": self.port_base + instance.pk}
        return Launched(endpoint_url=f"http://127.0.0.1:{self.port_base + instance.pk}",
                        port=self.port_base + instance.pk, handle={"fake": self.name})

    def stop(self, instance, grace: float) -> bool:
        self.book["stopped"].append(instance.pk)
        self.book["running"].pop(instance.pk, None)
        return True

    def is_alive(self, instance) -> bool:
        return instance.pk in self.book["running"]

    def log_tail(self, instance, lines: int = 40) -> str:
        return ""

    def running(self) -> dict[int, dict]:
        return dict(self.book["running"])

    def stop_orphan(self, instance_id: int, grace: float) -> bool:
        self.book["stopped_orphans"].append(instance_id)
        self.book["running"].pop(instance_id, None)
        return True


def configured(*names: str, **options) -> dict:
    """SWITCHYARD_RUNTIME_BACKENDS holding the built-in backends plus RecordingBackends of these names."""
    from django.conf import settings

    base = {k: v for k, v in settings.SWITCHYARD_RUNTIME_BACKENDS.items() if k in ("local", "simulator")}
    return {**base, **{name: {"class": "tests.fleet.fake_backends.RecordingBackend", "label": f"Fake {name}",
                              "options": options} for name in names}}
