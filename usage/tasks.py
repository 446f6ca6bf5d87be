"""Periodic usage work (schedule in settings.CELERY_BEAT_SCHEDULE). Each task is idempotent."""
from celery import shared_task
from django.utils import timezone


@shared_task(name="usage.roll_up_recent", time_limit=290, soft_time_limit=270)
def roll_up_recent() -> dict:
    """Recompute the last few hours, stale hours and their days."""
    from usage.refresh import refresh_rollups

    return refresh_rollups(timezone.now())


@shared_task(name="usage.prune_events", time_limit=900, soft_time_limit=840)
def prune_events() -> dict:
    """Delete raw events past SWITCHYARD_USAGE_RETENTION_DAYS, in bounded batches."""
    from usage.retention import prune_expired

    return prune_expired(timezone.now())


@shared_task(name="usage.enforce_budgets", time_limit=55, soft_time_limit=45)
def enforce_budgets() -> dict:
    """Compare month-to-date usage with each tenant's monthly budgets."""
    from usage.budgets import enforce_budgets as enforce

    return enforce(timezone.now())
