"""Usage & cost: time series and a tenant × model breakdown from the rollups, with CSV download."""
import csv

from django.contrib.auth.decorators import login_required
from django.http import StreamingHttpResponse
from django.shortcuts import render

from console import usage_data
from console.access import operations_or_404
from console.charts import line_chart
from console.timerange import RANGES, time_range
from console.views.overview import scoped_tenant_ids

USAGE_RANGES = ("24h", "7d", "30d")


class _Echo:
    def write(self, value):
        return value


@login_required
def usage_page(request):
    principal = operations_or_404(request)
    params = request.GET if request.GET.get("range") in USAGE_RANGES else {"range": "24h"}
    tr = time_range(params)
    tenant_ids = scoped_tenant_ids(principal)
    rows = usage_data.breakdown(tenant_ids, tr)
    if request.GET.get("format") == "csv":
        return _csv(rows, tr)
    series = usage_data.time_series(tenant_ids, tr)
    return render(request, "console/usage.html", {
        "range": tr, "range_choices": [c for c in tr.choices() if c[0] in USAGE_RANGES], "rows": rows,
        "totals": usage_data.totals(rows), "has_data": any(v for _, v in series["requests"]) or bool(rows),
        "requests_chart": line_chart(series["requests"], title=f"Requests per {tr.unit}", unit=tr.unit,
                                     value_label="requests"),
        "tokens_chart": line_chart(series["tokens"], title=f"Tokens per {tr.unit}", unit=tr.unit, value_label="tokens"),
        "cost_chart": line_chart(series["cost"], title=f"Cost (USD) per {tr.unit}", unit=tr.unit, value_label="USD")})


def _csv(rows, tr):
    writer = csv.writer(_Echo())
    lines = [writer.writerow(usage_data.CSV_COLUMNS)] + [writer.writerow(usage_data.csv_row(r)) for r in rows]
    response = StreamingHttpResponse(iter(lines), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="switchyard-usage-{tr.key}.csv"'
    return response


__all__ = ["usage_page", "RANGES"]
