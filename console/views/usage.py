"""Usage & cost: time series, cost per tenant and usage per model version (usage selectors), CSV download."""
import csv

from django.contrib.auth.decorators import login_required
from django.http import StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from console import usage_data
from console.access import USAGE, page_or_404
from console.charts import bar_chart, line_chart
from console.timerange import time_range
from tenants.access import tenant_ids_with

USAGE_RANGES = ("24h", "7d", "30d")


class _Echo:
    """csv.writer target that hands each line back instead of storing it."""

    def write(self, value):
        return value


@login_required
@require_safe
def usage_page(request):
    principal = page_or_404(request, USAGE)
    tr = time_range(request.GET if request.GET.get("range") in USAGE_RANGES else {"range": "24h"})
    q = usage_data.query(tenant_ids_with(principal, *USAGE), tr)
    costs = usage_data.cost_by_tenant(q)
    if request.GET.get("format") == "csv":
        return _csv(usage_data.csv_rows(costs), tr)
    return render(request, "console/usage.html", {
        "range": tr, "range_choices": [c for c in tr.choices() if c[0] in USAGE_RANGES], "costs": costs,
        "held": usage_data.held_units(costs),
        "models": usage_data.usage_by_model(q), **_charts(q, tr)})


def _charts(q, tr) -> dict:
    points = usage_data.series(q, tr)
    per_day = usage_data.cost_per_day(q)
    return {"has_traffic": any(v for _, v in points["requests"]),
            "requests_chart": line_chart(points["requests"], title=f"Requests per {tr.unit}", unit=tr.unit,
                                         value_label="requests"),
            "tokens_chart": line_chart(points["tokens"], title=f"Tokens per {tr.unit}", unit=tr.unit,
                                       value_label="tokens"),
            "cost_chart": bar_chart(per_day, title="Cost per day (USD)", value_label="USD") if per_day else ""}


def _csv(rows, tr):
    writer = csv.writer(_Echo())
    response = StreamingHttpResponse((writer.writerow(row) for row in rows), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="switchyard-cost-{tr.key}.csv"'
    return response
