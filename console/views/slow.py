"""Slow requests: those whose time to first token is above the range's p95, slowest first.

The gateway keeps the start of every prompt after secret redaction
(SWITCHYARD_GATEWAY_PROMPT_SAMPLE_CHARS) for SWITCHYARD_PROMPT_SAMPLE_RETENTION_HOURS; which requests
are slow is only known afterwards (p95 of the chosen range), so every request keeps its sample.
"""
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render
from django.views.decorators.http import require_safe

from console import stats
from console.access import SLOW_REQUESTS, principal_of, sees_slow_requests
from console.timerange import time_range
from tenants.access import tenant_ids_with

LIMIT = 100
PROMPT_CHARS = 200


@login_required
@require_safe
def slow_requests(request):
    principal = principal_of(request)
    if not sees_slow_requests(principal):
        raise Http404("Not found.")
    tr = time_range(request.GET)
    events = stats.events_in(tenant_ids_with(principal, SLOW_REQUESTS), tr)
    p95 = stats.percentile(events, "ttft_ms", 0.95)
    slow = events.filter(ttft_ms__gt=p95).select_related("tenant").order_by("-ttft_ms")[:LIMIT] if p95 else []
    return render(request, "console/slow.html", {
        "range": tr, "p95": p95, "rows": [_row(e) for e in slow], "prompt_chars": PROMPT_CHARS,
        "sample_chars": settings.SWITCHYARD_GATEWAY_PROMPT_SAMPLE_CHARS,
        "sample_hours": settings.SWITCHYARD_PROMPT_SAMPLE_RETENTION_HOURS})


def _row(event) -> dict:
    prompt = event.redacted_prompt or None
    return {"event": event, "prompt": prompt[:PROMPT_CHARS] + ("…" if len(prompt) > PROMPT_CHARS else "")
            if prompt else None}
