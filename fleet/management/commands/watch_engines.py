"""manage.py watch_engines — follow the engines of every backend that observes its own (Kubernetes pods).

Runs until SIGTERM/SIGINT. Run one beside the Celery worker (the Helm chart does); two at once do
no harm (every transition they make is checked against the instance's current state).
"""
import signal
import threading
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from fleet.runtime import backend_names, get_backend


class Command(BaseCommand):
    help = "Watch the engines of backends that report readiness themselves (e.g. Kubernetes pods)."

    def add_arguments(self, parser):
        parser.add_argument("--heartbeat", type=Path, default=None,
                            help="Touch this file every second while every watch runs (a liveness probe reads it).")

    def handle(self, *args, **options):
        observers = [(name, get_backend(name).observer(name)) for name in backend_names()
                     if not get_backend(name).probed_by_fleet]
        if not observers:
            raise CommandError("no configured runtime backend watches its own engines (SWITCHYARD_RUNTIME_BACKENDS)")
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        threads = [threading.Thread(target=observer.run, args=(stop,), name=f"watch-{name}", daemon=True)
                   for name, observer in observers]
        for thread in threads:
            thread.start()
        self.stdout.write(f"watching engines of: {', '.join(name for name, _ in observers)}")
        while not stop.wait(1.0):
            if options["heartbeat"] is not None and all(thread.is_alive() for thread in threads):
                options["heartbeat"].touch()
        for thread in threads:
            thread.join(timeout=5)
