"""manage.py fleet_stop_engines — stop every engine process of this install's fleet namespace."""
from django.conf import settings
from django.core.management.base import BaseCommand

from fleet.runtime.processes import kill_instance, tagged_processes


class Command(BaseCommand):
    help = ("Stop this host's engine processes (SIGTERM, then SIGKILL after the grace period). "
            "Instance rows are left as they are: the health checker marks them failed and the next "
            "reconcile starts replacements.")

    def handle(self, *args, **options):
        instance_ids = sorted(tagged_processes())
        for instance_id in instance_ids:
            kill_instance(instance_id, grace=settings.SWITCHYARD_FLEET_STOP_GRACE_SECONDS)
        self.stdout.write(f"stopped {len(instance_ids)} engine(s) in namespace {settings.SWITCHYARD_FLEET_NAMESPACE}")
