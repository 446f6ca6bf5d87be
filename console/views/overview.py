"""Overview: traffic, latency, errors and cost at a glance, with instances by state and top tenants."""
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_safe

from console import stats
from console.access import USAGE, principal_of, sees_audit, sees_operations
from console.charts import bar_chart, line_chart
from console.timerange import time_range
from fleet.permissions import readable_deployments
from tenants.access import holds_anywhere, tenant_ids_with


@login_required
@require_safe
def home(request):
    principal = principal_of(request)
    if not holds_anywhere(principal, *USAGE):  # traffic and cost are usage: elsewhere, the next best page
        if sees_operations(principal):
            return redirect("console:tenants")
        return redirect("console:audit" if sees_audit(principal) else "console:no-access")
    tr = time_range(request.GET)
    tenant_ids = tenant_ids_with(principal, *USAGE)  # the usage rule; instance states: the fleet rule
    events = stats.events_in(tenant_ids, tr)
    return render(request, "console/overview.html", {"range": tr, **_numbers(events, tenant_ids, tr),
                                                     **_charts(events, readable_deployments(principal), tr)})


def _numbers(events, tenant_ids, tr) -> dict:
    total = events.count()
    return {"total_requests": total, "requests_per_minute": total / tr.minutes,
            "ttft_p95": stats.percentile(events, "ttft_ms", 0.95), "error_rate": stats.error_rate(events),
            "cost_per_completion": stats.cost_per_completion(tenant_ids, tr)}


def _charts(events, deployments, tr) -> dict:
    per_bucket = stats.series(events, tr)
    states = stats.instances_by_state(deployments)
    top = stats.top_tenants(events)
    return {
        "requests_chart": line_chart(per_bucket, title=f"Requests per {tr.unit}, {tr.label.lower()}",
                                     unit=tr.unit, value_label="requests"),
        "requests_series": per_bucket, "states": states, "top_tenants": top,
        "states_chart": bar_chart(states, title="Instances by state", value_label="instances"),
        "top_chart": bar_chart(top, title="Top tenants by requests", value_label="requests") if top else "",
    }


@login_required
@require_safe
def no_access(request):
    """Signed in, but no role anywhere yet."""
    return render(request, "console/no_access.html", status=200)
