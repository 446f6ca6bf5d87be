"""manage.py roll_up_usage --since YYYY-MM-DD [--until YYYY-MM-DD]: recompute whole days of rollups."""
import time
from datetime import datetime, timezone

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone as dj_timezone

from usage.periods import DAY, floor_day, retention_cutoff
from usage.refresh import backfill


def _day(text: str) -> datetime:
    try:
        return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    except ValueError:
        raise CommandError(f"Not a date (YYYY-MM-DD): {text!r}") from None


class Command(BaseCommand):
    help = "Recompute hourly and daily rollups (and cost) of whole UTC days from raw events, e.g. after a repair."

    def add_arguments(self, parser):
        parser.add_argument("--since", required=True, type=_day)
        parser.add_argument("--until", type=_day, help="Exclusive; default: tomorrow.")
        parser.add_argument("--allow-before-retention", action="store_true",
                            help="Recompute days whose raw events may be pruned (their rollups would shrink).")

    def handle(self, *args, since, until, allow_before_retention, **options):
        now = dj_timezone.now()
        until = until or floor_day(now) + DAY
        if since >= until:
            raise CommandError("--since must be before --until.")
        if since < retention_cutoff(now) and not allow_before_retention:
            raise CommandError("Raw events before the retention cutoff are pruned: recomputing those days would "
                               "erase their rollups. Pass --allow-before-retention if the events are still there.")
        began = time.monotonic()
        counted = backfill(since, until, now=now)
        took = time.monotonic() - began
        self.stdout.write(f"rolled up {(until - since).days} days ({counted:,} events) in {took:.1f} s")
