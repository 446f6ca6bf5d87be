"""manage.py fleet_stop_engines — stop every engine of this install (and only of this install)."""
from django.conf import settings
from django.core.management.base import BaseCommand

from fleet.install import engine_owner
from fleet.runtime.processes import kill_instance, tagged_processes


class Command(BaseCommand):
    help = ("Stop this install's engine processes on this host (SIGTERM, then SIGKILL after the grace period). "
            "Engines of other installs — another database, even in the same namespace — are left alone: "
            "they do not carry this install's token. Instance rows are left as they are: the health checker "
            "marks them failed and the next reconcile starts replacements.")

    def handle(self, *args, **options):
        owner = engine_owner()
        instance_ids = sorted(tagged_processes(owner))
        left = [iid for iid in instance_ids
                if not kill_instance(owner, iid, grace=settings.SWITCHYARD_FLEET_STOP_GRACE_SECONDS)]
        self.stdout.write(f"stopped {len(instance_ids) - len(left)} engine(s) of namespace {owner.namespace}")
        if left:
            self.stderr.write(f"still running after SIGKILL: instances {left}")
