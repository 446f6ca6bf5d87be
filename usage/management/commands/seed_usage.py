"""manage.py seed_usage --events N --days D --tenants T: synthetic usage plus its rollups."""
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.utils import timezone

from usage import seeding
from usage.models import UsageRollup
from usage.periods import DAY, floor_day
from usage.refresh import backfill
from usage.seed_rollups import roll_up_seeded


class Command(BaseCommand):
    help = "Bulk-insert N synthetic usage events over the last D days and build their hourly and daily rollups."

    def add_arguments(self, parser):
        parser.add_argument("--events", type=int, default=100_000)
        parser.add_argument("--days", type=int, default=365)
        parser.add_argument("--tenants", type=int, default=5)
        parser.add_argument("--keys-per-tenant", type=int, default=3)
        parser.add_argument("--batch", type=int, default=50_000)
        parser.add_argument("--skip-rollups", action="store_true")

    def handle(self, *args, events, days, tenants, keys_per_tenant, batch, skip_rollups, **options):
        if events < 1 or days < 1 or tenants < 1 or keys_per_tenant < 1:
            raise CommandError("--events, --days, --tenants and --keys-per-tenant must be at least 1.")
        now = timezone.now()
        end = floor_day(now)
        start = end - DAY * days
        with transaction.atomic():
            pool = self._targets(tenants, keys_per_tenant, start, end)
        began = time.monotonic()
        seeding.insert_events(events, pool, start, end, batch=batch, progress=self._progress(events, began))
        self.stdout.write(f"inserted {events:,} events in {time.monotonic() - began:.1f} s")
        if not skip_rollups:
            began = time.monotonic()
            self._roll_up(start, end, now)
            self.stdout.write(f"rolled up {days} days in {time.monotonic() - began:.1f} s")

    def _roll_up(self, start, end, now):
        """Set-based on PostgreSQL (a fresh range only: rollups already there would be doubled), else day by day."""
        fresh = not UsageRollup.objects.filter(period_start__gte=start, period_start__lt=end).exists()
        if connection.vendor == "postgresql" and fresh:
            roll_up_seeded(start, end, now=now)
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")  # the planner must know the tables grew before anyone reads them
        else:
            backfill(start, end, now=now)

    def _targets(self, tenants, keys_per_tenant, start, end):
        tenant_rows, versions = seeding.seed_tenants(tenants), seeding.seed_versions()
        placed = seeding.seed_instances(tenant_rows, versions, start, end)
        return seeding.targets(tenant_rows, versions, placed, keys_per_tenant)

    def _progress(self, total, began):
        def report(written):
            if written == total or written % 1_000_000 < 50_000:
                self.stdout.write(f"  {written:,}/{total:,} events ({time.monotonic() - began:.0f} s)")
        return report
