"""/api/v1/usage/: charts, breakdowns, cost and GPU prices, answered from rollups and the raw events of
the hours not rolled up yet (usage/live.py)."""
import csv
import io

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.actor import Actor
from controlplane.api.viewsets import CrossTenantReadMixin, ReadRuleMixin
from tenants.roles import Resource
from usage import selectors, services
from usage.api.serializers import (
    BreakdownQuerySerializer,
    BudgetQuerySerializer,
    BudgetStatesSerializer,
    CostQuerySerializer,
    GpuPriceSerializer,
    GpuPriceWriteSerializer,
    UsageBreakdownSerializer,
    UsageCostSerializer,
    UsageQuerySerializer,
    UsageSeriesSerializer,
)
from usage.models import BudgetState, GpuPrice


class UsageReadView(CrossTenantReadMixin, APIView):
    resource = Resource.USAGE
    query_serializer = UsageQuerySerializer

    def parsed(self, request) -> tuple[dict, selectors.UsageQuery]:
        params = self.query_serializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        query = selectors.UsageQuery(
            tenant_ids=self.scoped_tenant_ids(data.get("tenant")), since=data["since"], until=data["until"],
            granularity=data["granularity"], model_version_id=data.get("model_version"), key=data.get("key"))
        return data, query

    @staticmethod
    def envelope(query: selectors.UsageQuery, **rest) -> dict:
        return {"granularity": query.granularity, "since": query.since, "until": query.until, **rest}


class UsageSeriesView(UsageReadView):
    @extend_schema(parameters=[UsageQuerySerializer], responses=UsageSeriesSerializer)
    def get(self, request):
        """Requests, errors, tokens, latency percentiles and feedback per hour or day."""
        _, query = self.parsed(request)
        return Response(self.envelope(query, points=selectors.time_series(query)))


class UsageBreakdownView(UsageReadView):
    query_serializer = BreakdownQuerySerializer

    @extend_schema(parameters=[BreakdownQuerySerializer],
                   responses={(200, "application/json"): UsageBreakdownSerializer, (200, "text/csv"): OpenApiTypes.STR})
    def get(self, request):
        """Totals by tenant, model version, quantization, key prefix or day; `?format=csv` downloads them."""
        data, query = self.parsed(request)
        rows = selectors.breakdown(query, data["by"])
        if data["format"] == "csv":
            return csv_response(rows, f"usage-by-{data['by']}.csv")
        return Response(self.envelope(query, by=data["by"], rows=rows))


class UsageCostView(UsageReadView):
    query_serializer = CostQuerySerializer

    @extend_schema(parameters=[CostQuerySerializer],
                   responses={(200, "application/json"): UsageCostSerializer, (200, "text/csv"): OpenApiTypes.STR})
    def get(self, request):
        """Cost by tenant, model version, quantization or day: usage and idle apart, per-unit costs, acceptance."""
        data, query = self.parsed(request)
        rows = selectors.cost_table(query, data["by"])
        if data["format"] == "csv":
            return csv_response(rows, f"cost-by-{data['by']}.csv")
        return Response(self.envelope(query, by=data["by"], rows=rows))


class BudgetStateView(UsageReadView):
    @extend_schema(parameters=[BudgetQuerySerializer], responses=BudgetStatesSerializer)
    def get(self, request):
        """Month-to-date tokens and cost of each tenant, and whether it is over budget."""
        tenant_ids = self.scoped_tenant_ids(request.query_params.get("tenant"))
        states = BudgetState.objects.select_related("tenant").order_by("tenant__slug")
        if tenant_ids is not None:
            states = states.filter(tenant_id__in=tenant_ids)
        return Response({"rows": [budget_row(state) for state in states]})


def budget_row(state: BudgetState) -> dict:
    return {"tenant": state.tenant.slug, "over_budget": state.over_budget, "reason": state.reason or None,
            "since": state.since, "checked_at": state.checked_at, "tokens_month_to_date": state.tokens_month_to_date,
            "cost_month_to_date_usd": str(state.cost_month_to_date_usd)}


@extend_schema_view(list=extend_schema(parameters=[
    OpenApiParameter("history", bool, description="Every price ever set, not only the current one per GPU type.")]))
class GpuPriceViewSet(ReadRuleMixin, mixins.ListModelMixin, viewsets.GenericViewSet):
    """GPU hourly prices: whoever may read usage somewhere reads them; platform admins set new ones (history kept)."""

    resource = Resource.USAGE
    serializer_class = GpuPriceSerializer
    queryset = GpuPrice.objects.all()

    def get_queryset(self):
        if self.request.query_params.get("history") in ("1", "true"):
            return GpuPrice.objects.all()
        from django.utils import timezone

        current = {}
        for price in GpuPrice.objects.filter(effective_from__lte=timezone.now()):
            current.setdefault(price.gpu_type.lower(), price)  # ordered newest first per type
        return sorted(current.values(), key=lambda price: price.gpu_type.lower())

    @extend_schema(request=GpuPriceWriteSerializer, responses=GpuPriceSerializer)
    def create(self, request):
        if not self.principal.is_platform_admin:
            raise PermissionDenied("Only platform admins set GPU prices.")
        payload = GpuPriceWriteSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        try:
            price = services.set_gpu_price(actor=Actor.from_request(request), **payload.validated_data)
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None
        return Response(GpuPriceSerializer(price).data, status=status.HTTP_201_CREATED)


def csv_response(rows: list[dict], filename: str) -> HttpResponse:
    """A breakdown as CSV: nested labels (tenant, model version) flattened to their name."""
    buffer = io.StringIO()
    flat = [{name: _cell(value) for name, value in row.items()} for row in rows]
    writer = csv.DictWriter(buffer, fieldnames=list(flat[0]) if flat else ["empty"])
    writer.writeheader()
    writer.writerows(flat)
    response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _cell(value):
    if isinstance(value, dict):
        return value.get("slug") or value.get("name") or value.get("id")
    return "" if value is None else value
