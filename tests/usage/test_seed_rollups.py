"""The set-based rollups of a seeded range (PostgreSQL) are the rows the periodic rollup writes."""
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from usage import seeding
from usage.models import CompletionFeedback, CostRollup, RollupRun, UsageEvent, UsageRollup
from usage.periods import DAY, floor_day
from usage.refresh import backfill
from usage.seed_rollups import roll_up_seeded

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="set-based seeding is PostgreSQL-only")

USAGE_FIELDS = [f.name for f in UsageRollup._meta.fields if f.name != "id"]
COST_FIELDS = [f.name for f in CostRollup._meta.fields if f.name != "id"]


def _snapshot():
    usage = sorted(tuple(_rounded(v) for v in row) for row in UsageRollup.objects.values_list(*USAGE_FIELDS))
    cost = sorted(tuple(_rounded(v) for v in row) for row in CostRollup.objects.values_list(*COST_FIELDS))
    runs = sorted(RollupRun.objects.values_list("granularity", "period_start", "events"))
    return usage, cost, runs


def _rounded(value):
    # Float sums may differ in the last bit with summation order; nothing else may differ.
    return round(value, 6) if isinstance(value, float) else str(value) if isinstance(value, list) else value


def test_seeded_rollups_equal_the_periodic_rollups(db):
    now = timezone.now()
    end = floor_day(now)
    start = end - DAY * 2
    tenants, versions = seeding.seed_tenants(2), seeding.seed_versions()
    pool = seeding.targets(tenants, versions, seeding.seed_instances(tenants, versions, start, end), 2)
    seeding.insert_events(3000, pool, start, end, batch=1000)
    # A little feedback, counted only when its tenant matches the event's.
    for event in UsageEvent.objects.order_by("pk")[:40]:
        CompletionFeedback.objects.create(request_id=event.request_id, tenant_id=event.tenant_id,
                                          accepted=event.pk % 3 != 0, recorded_at=now)

    roll_up_seeded(start, end, now=now)
    seeded = _snapshot()
    backfill(start, end, now=now)  # replaces every period the regular way
    assert _snapshot() == seeded
    assert seeded[0] and seeded[1] and len(seeded[2]) == 2 * 24 + 2


def test_event_indexes_survive_seeding(db):
    def index_names():
        with connection.cursor() as cursor:
            cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'usage_usageevent'")
            return sorted(name for (name,) in cursor.fetchall())

    before = index_names()
    now = timezone.now()
    tenants, versions = seeding.seed_tenants(1), seeding.seed_versions()
    pool = seeding.targets(tenants, versions, {}, 1)
    seeding.insert_events(100, pool, now - timedelta(hours=2), now, batch=50)
    assert index_names() == before and UsageEvent.objects.count() == 100
