"""Writes of the usage app: usage batches, completion feedback, GPU prices and budget states."""
from datetime import datetime
from decimal import Decimal

from django.core.cache import cache
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from audit.actor import Actor
from audit.services import record_event
from usage.ingest import OCCURRED_AT, insert_events
from usage.models import BudgetState, CompletionFeedback, GpuPrice, Granularity, PriceUnit, RollupRun, UsageEvent
from usage.periods import floor_hour, recompute_window_start
from usage.storable import storable_text

BUDGET_CACHE_KEY = "usage:over-budget:{}"


@transaction.atomic
def record_usage_batch(events: list) -> int:
    """Insert a batch; events whose request_id is already stored are skipped (exactly once).

    Events are dicts by field, or rows in `usage.ingest.COLUMNS` order (the gateway's). Returns
    how many were new. Usage telemetry is not a configuration change, so it writes no audit event.
    """
    if not events:
        return 0
    inserted = insert_events(events)
    mark_hours_stale([event["occurred_at"] if isinstance(event, dict) else event[OCCURRED_AT] for event in events])
    return inserted


def mark_hours_stale(moments: list[datetime]) -> None:
    """Hours older than the periodic recompute window are re-done by the next run (late data)."""
    window_start = recompute_window_start(timezone.now())
    if not moments or min(moments) >= window_start:
        return  # nearly every gateway batch: all of it inside the window
    hours = {floor_hour(moment) for moment in moments if moment < window_start}
    RollupRun.objects.filter(granularity=Granularity.HOUR, period_start__in=hours).update(stale=True)



class FeedbackNotAllowed(PermissionDenied):
    """The request id belongs to another tenant (the gateway answers 404, revealing nothing)."""


@transaction.atomic
def record_feedback(request_id: str, accepted: bool, *, tenant) -> CompletionFeedback:
    """Record whether a completion was accepted; the last answer wins (a user may change their mind)."""
    # A NUL or a lone surrogate is no stored request id (the gateway mints hex), and no database could
    # even be asked about it: PostgreSQL refuses NUL in a query, neither driver encodes a lone surrogate.
    if not request_id or len(request_id) > 64 or storable_text(request_id) != request_id:
        raise ValidationError({"request_id": "A request id of 1 to 64 characters."})
    event = UsageEvent.objects.filter(request_id=request_id).values("tenant_id", "occurred_at").first()
    existing = CompletionFeedback.objects.select_for_update().filter(request_id=request_id).first()
    owner = event["tenant_id"] if event else (existing.tenant_id if existing else tenant.pk)
    if owner != tenant.pk:
        raise FeedbackNotAllowed("No such request.")
    feedback, _ = CompletionFeedback.objects.update_or_create(
        request_id=request_id, defaults={"tenant": tenant, "accepted": bool(accepted), "recorded_at": timezone.now()})
    if event:
        mark_hours_stale([event["occurred_at"]])
    return feedback


def price_view(price: GpuPrice) -> dict:
    return {"gpu_type": price.gpu_type, "unit": price.unit, "hourly_usd": str(price.hourly_usd),
            "effective_from": price.effective_from.isoformat(), "note": price.note}


@transaction.atomic
def set_gpu_price(gpu_type: str, hourly_usd: Decimal, *, unit: str = PriceUnit.GPU, effective_from=None,
                  note: str = "", actor: Actor) -> GpuPrice:
    """Set a GPU type's hourly price from `effective_from` (default now); earlier hours keep their price."""
    price = GpuPrice(gpu_type=gpu_type.strip(), unit=unit, hourly_usd=Decimal(hourly_usd),
                     effective_from=effective_from or timezone.now(), note=note)
    price.full_clean(validate_unique=False, validate_constraints=False)
    if GpuPrice.objects.filter(gpu_type__iexact=price.gpu_type, effective_from=price.effective_from).exists():
        raise ValidationError({"effective_from": "This GPU type already has a price from that moment."})
    before = current_price(price.gpu_type)
    price.save()
    record_event(actor=actor, action="usage.gpu_price.set", target=price,
                 before=price_view(before) if before else None, after=price_view(price))
    return price


def current_price(gpu_type: str) -> GpuPrice | None:
    return (GpuPrice.objects.filter(gpu_type__iexact=gpu_type, effective_from__lte=timezone.now())
            .order_by("-effective_from").first())


@transaction.atomic
def set_budget_state(tenant, *, over_budget: bool, reason: str, tokens: int, cost_usd: Decimal,
                     actor: Actor) -> BudgetState:
    """Store a tenant's budget check; entering or leaving `over budget` writes an audit event."""
    state, _ = BudgetState.objects.select_for_update().get_or_create(tenant=tenant)
    changed = state.over_budget != over_budget or (over_budget and state.reason != reason)
    now = timezone.now()
    before = budget_view(state)
    if state.over_budget != over_budget:
        state.since = now
    state.over_budget, state.reason, state.checked_at = over_budget, reason if over_budget else "", now
    state.tokens_month_to_date, state.cost_month_to_date_usd = tokens, cost_usd
    state.save()
    if changed:
        action = "tenant.over_budget" if over_budget else "tenant.within_budget"
        record_event(actor=actor, action=action, tenant=tenant, target=tenant, before=before, after=budget_view(state))
        reason_now = state.reason or None
        transaction.on_commit(lambda: cache.set(BUDGET_CACHE_KEY.format(tenant.pk), reason_now or "", 300))
    return state


def budget_view(state: BudgetState) -> dict:
    return {"over_budget": state.over_budget, "reason": state.reason,
            "tokens_month_to_date": state.tokens_month_to_date,
            "cost_month_to_date_usd": str(state.cost_month_to_date_usd)}
