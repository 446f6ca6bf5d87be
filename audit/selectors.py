"""Reading the audit trail: which events a caller may see, filtered as asked."""
from django.db.models import Q, QuerySet
from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import ValidationError

from audit.models import AuditEvent
from tenants.access import Principal, has_perm, visible_tenants

FILTER_NAMES = ("since", "until", "tenant", "actor", "action", "target_type")


def events_visible_to(principal: Principal, perm: str) -> QuerySet:
    """Platform admins see every event; others see their tenants' events where they hold `perm`."""
    if principal.is_platform_admin:
        return AuditEvent.objects.all()
    tenant_ids = [t.pk for t in visible_tenants(principal) if has_perm(principal, t, perm)]
    return AuditEvent.objects.filter(tenant_id__in=tenant_ids)


def apply_filters(events: QuerySet, params) -> QuerySet:
    """since/until (ISO-8601, until exclusive), tenant (slug), actor (label), action (exact or `prefix.`)."""
    _reject_nul(params)
    since, until = _time(params, "since"), _time(params, "until")
    if since:
        events = events.filter(occurred_at__gte=since)
    if until:
        events = events.filter(occurred_at__lt=until)
    if params.get("tenant"):
        events = events.filter(tenant_slug=params["tenant"])
    if params.get("actor"):
        events = events.filter(Q(actor_label=params["actor"]) | Q(actor_label__startswith=params["actor"] + " ("))
    if params.get("action"):
        action = params["action"]
        events = events.filter(action__startswith=action) if action.endswith(".") else events.filter(action=action)
    if params.get("target_type"):
        events = events.filter(target_type=params["target_type"])
    return events


def _reject_nul(params) -> None:
    # PostgreSQL cannot compare text with a NUL byte: refuse it here rather than fail with a 500.
    for name in FILTER_NAMES:
        if "\x00" in (params.get(name) or ""):
            raise ValidationError({name: "Null characters are not allowed."})


def _time(params, name):
    raw = params.get(name)
    if not raw:
        return None
    try:
        value = parse_datetime(raw)
    except ValueError:  # well-formed but impossible, e.g. month 13
        value = None
    if value is None or value.tzinfo is None:
        raise ValidationError({name: "Use an ISO-8601 date-time with a timezone, e.g. 2026-11-30T00:00:00Z."})
    return value
