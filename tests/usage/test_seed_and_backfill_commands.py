"""seed_usage builds events plus their rollups; roll_up_usage will not erase pruned history."""
import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum

from usage.models import CostRollup, UsageEvent, UsageRollup


def test_seed_usage_inserts_events_and_rolls_them_up(db):
    call_command("seed_usage", events=300, days=2, tenants=2, keys_per_tenant=1, verbosity=0)
    assert UsageEvent.objects.count() == 300
    for granularity in ("hour", "day"):
        rows = UsageRollup.objects.filter(granularity=granularity)
        assert rows.aggregate(n=Sum("requests"))["n"] == 300
    # Two shared pools and one dedicated deployment were up for both days: idle and usage cost exist.
    assert CostRollup.objects.filter(granularity="day", kind="usage").exists()
    assert CostRollup.objects.filter(granularity="day", kind="idle").exists()


def test_roll_up_usage_refuses_days_past_retention(db):
    with pytest.raises(CommandError, match="retention"):
        call_command("roll_up_usage", "--since", "2000-01-01", verbosity=0)
