"""Restarts back off exponentially up to a cap, and a long-stable engine resets the chain."""
from datetime import timedelta

from django.utils import timezone

from fleet.backoff import next_restart_count, restart_delay, start_not_before


def test_first_start_waits_nothing_then_doubles_up_to_the_cap(settings):
    settings.SWITCHYARD_FLEET_BACKOFF_BASE_SECONDS = 5
    settings.SWITCHYARD_FLEET_BACKOFF_MAX_SECONDS = 300
    assert [restart_delay(n) for n in range(0, 9)] == [0, 5, 10, 20, 40, 80, 160, 300, 300]
    assert restart_delay(10_000) == 300


def test_crash_looping_engines_inherit_the_chain_and_stable_ones_reset_it(settings):
    settings.SWITCHYARD_FLEET_STABLE_SECONDS = 600
    assert next_restart_count(3, None) == 4
    assert next_restart_count(3, timedelta(seconds=30)) == 4
    assert next_restart_count(3, timedelta(hours=2)) == 1


def test_replacement_start_is_counted_from_the_failure(settings):
    settings.SWITCHYARD_FLEET_BACKOFF_BASE_SECONDS = 5
    settings.SWITCHYARD_FLEET_BACKOFF_MAX_SECONDS = 300
    failed_at = timezone.now()
    assert start_not_before(failed_at, 2) == failed_at + timedelta(seconds=10)
