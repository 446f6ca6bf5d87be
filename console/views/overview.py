"""Overview: traffic, latency, errors and cost at a glance, with instances by state and top tenants."""
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render

from console import stats
from console.access import OPERATIONS, principal_of, sees_audit, sees_operations, tenants_with
from console.charts import bar_chart, line_chart
from console.timerange import time_range


def scoped_tenant_ids(principal, perm=OPERATIONS):
    """None (everything) for platform admins, else the ids of the tenants the user may see here."""
    return None if principal.is_platform_admin else [t.pk for t in tenants_with(principal, perm)]


@login_required
def home(request):
    principal = principal_of(request)
    if not sees_operations(principal):
        return redirect("console:audit" if sees_audit(principal) else "console:no-access")
    tr = time_range(request.GET)
    tenant_ids = scoped_tenant_ids(principal)
    events = stats.events_in(tenant_ids, tr)
    return render(request, "console/overview.html", {"range": tr, **_numbers(events, tenant_ids, tr),
                                                     **_charts(events, tenant_ids, tr)})


def _numbers(events, tenant_ids, tr) -> dict:
    total = events.count()
    return {"total_requests": total, "requests_per_minute": total / tr.minutes,
            "ttft_p95": stats.percentile(events, "ttft_ms", 0.95), "error_rate": stats.error_rate(events),
            "cost_per_completion": stats.cost_per_completion(tenant_ids, tr)}


def _charts(events, tenant_ids, tr) -> dict:
    per_bucket = stats.series(events, tr)
    states = stats.instances_by_state(stats.visible_deployments(tenant_ids))
    top = stats.top_tenants(events)
    return {
        "requests_chart": line_chart(per_bucket, title=f"Requests per {tr.unit}, {tr.label.lower()}",
                                     unit=tr.unit, value_label="requests"),
        "requests_series": per_bucket, "states": states, "top_tenants": top,
        "states_chart": bar_chart(states, title="Instances by state", value_label="instances"),
        "top_chart": bar_chart(top, title="Top tenants by requests", value_label="requests") if top else "",
    }


@login_required
def no_access(request):
    """Signed in, but no role anywhere yet."""
    return render(request, "console/no_access.html", status=200)
