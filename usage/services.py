"""Writing usage events in batches, off the request path."""
from django.db import transaction

from usage.models import UsageEvent


@transaction.atomic
def record_usage_batch(events: list[dict]) -> int:
    """Insert a batch; events whose request_id is already stored are skipped (exactly once).

    Usage telemetry is not a configuration change, so it writes no audit event.
    """
    rows = [UsageEvent(**event) for event in events]
    before = UsageEvent.objects.filter(request_id__in=[row.request_id for row in rows]).count()
    UsageEvent.objects.bulk_create(rows, ignore_conflicts=True, batch_size=500)
    return len(rows) - before
