"""Pruning raw events (and feedback) past the retention period, in bounded batches."""
from datetime import datetime, timedelta

from django.conf import settings

from usage.models import CompletionFeedback, UsageEvent
from usage.periods import retention_cutoff


def prune_expired(now: datetime) -> dict:
    """Delete raw events and feedback older than the retention cutoff; rollups stay (they are final)."""
    cutoff = retention_cutoff(now)
    return {"events": _prune(UsageEvent.objects.filter(occurred_at__lt=cutoff), "occurred_at"),
            "feedback": _prune(CompletionFeedback.objects.filter(recorded_at__lt=cutoff), "recorded_at"),
            "prompts": forget_prompts(now)}


def forget_prompts(now: datetime) -> int:
    """Clear prompt samples older than SWITCHYARD_PROMPT_SAMPLE_RETENTION_HOURS (counts stay)."""
    cutoff = now - timedelta(hours=settings.SWITCHYARD_PROMPT_SAMPLE_RETENTION_HOURS)
    kept = UsageEvent.objects.filter(occurred_at__lt=cutoff).exclude(redacted_prompt="")
    cleared = 0
    for _ in range(settings.SWITCHYARD_USAGE_PRUNE_MAX_BATCHES):
        ids = list(kept.values_list("id", flat=True)[:settings.SWITCHYARD_USAGE_PRUNE_BATCH])
        if not ids:
            break
        cleared += UsageEvent.objects.filter(id__in=ids).update(redacted_prompt="")
    return cleared


def _prune(expired, time_field: str) -> int:
    """Small batches keep each DELETE short, so the gateway's inserts never wait long behind it."""
    deleted = 0
    for _ in range(settings.SWITCHYARD_USAGE_PRUNE_MAX_BATCHES):
        ids = list(expired.order_by(time_field).values_list("id", flat=True)[:settings.SWITCHYARD_USAGE_PRUNE_BATCH])
        if not ids:
            break
        expired.model.objects.filter(id__in=ids).delete()
        deleted += len(ids)
    return deleted
