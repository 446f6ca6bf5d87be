"""Query parameters and GPU price payloads of /api/v1/usage/."""
from datetime import timedelta

from django.utils import timezone
from rest_framework import serializers

from usage.histograms import SUMMARY_QUANTILES
from usage.models import GpuPrice, Granularity, PriceUnit
from usage.periods import DAY, HOUR, floor_day, floor_hour
from usage.rollups import COUNTERS
from usage.selectors import BREAKDOWNS, COST_BREAKDOWNS

MAX_RANGE = {Granularity.HOUR: timedelta(days=31), Granularity.DAY: timedelta(days=400)}
DEFAULT_RANGE = {Granularity.HOUR: timedelta(days=1), Granularity.DAY: timedelta(days=30)}


class UsageQuerySerializer(serializers.Serializer):
    """`since` is rounded down and `until` up to whole periods; until defaults to now, since to one range back."""

    tenant = serializers.SlugField(required=False, help_text="Tenant slug; default: every tenant you may read.")
    model_version = serializers.IntegerField(required=False, min_value=1, max_value=2**63 - 1)
    key = serializers.CharField(required=False, max_length=32, help_text="API key prefix.")
    granularity = serializers.ChoiceField(choices=Granularity.choices, default=Granularity.DAY)
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)

    def validate(self, attrs):
        granularity = attrs["granularity"]
        floor, step = (floor_hour, HOUR) if granularity == Granularity.HOUR else (floor_day, DAY)
        until = attrs.get("until") or timezone.now()
        until = floor(until) if floor(until) == until else floor(until) + step
        since = floor(attrs.get("since") or until - DEFAULT_RANGE[granularity])
        if since >= until:
            raise serializers.ValidationError({"since": "Must be before until."})
        if until - since > MAX_RANGE[granularity]:
            raise serializers.ValidationError(
                {"since": f"At most {MAX_RANGE[granularity].days} days at {granularity} granularity."})
        return {**attrs, "since": since, "until": until}


class BreakdownQuerySerializer(UsageQuerySerializer):
    by = serializers.ChoiceField(choices=list(BREAKDOWNS), default="tenant")
    format = serializers.ChoiceField(choices=["json", "csv"], default="json")


class CostQuerySerializer(UsageQuerySerializer):
    by = serializers.ChoiceField(choices=list(COST_BREAKDOWNS), default="tenant")
    format = serializers.ChoiceField(choices=["json", "csv"], default="json")

    def validate(self, attrs):
        if attrs.get("key"):
            raise serializers.ValidationError({"key": "Cost is not broken down by API key."})
        return super().validate(attrs)


class GpuPriceSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuPrice
        fields = ["id", "gpu_type", "unit", "hourly_usd", "effective_from", "note", "created_at"]
        read_only_fields = fields


class GpuPriceWriteSerializer(serializers.Serializer):
    gpu_type = serializers.RegexField(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", max_length=64)
    hourly_usd = serializers.DecimalField(max_digits=10, decimal_places=4, min_value=0)
    unit = serializers.ChoiceField(choices=PriceUnit.choices, default=PriceUnit.GPU)
    effective_from = serializers.DateTimeField(required=False,
                                               help_text="Default: now. Earlier hours keep their price.")
    note = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")


# --- Response bodies, for the OpenAPI schema (the views build plain dicts; these describe them). ---

def _figures(fields: dict) -> type:
    return type("Figures", (serializers.Serializer,), fields)


def _totals_fields() -> dict:
    """usage.selectors.describe: counters, then ratios and percentiles that are null when nothing was counted."""
    fields: dict[str, serializers.Field] = {name: serializers.IntegerField() for name in COUNTERS}
    fields["errors"] = serializers.IntegerField()
    for name in ("error_rate", "acceptance_ratio", "latency_avg_ms", "ttft_avg_ms"):
        fields[name] = serializers.FloatField(allow_null=True)
    fields["engine_work"] = serializers.FloatField()
    for prefix in ("ttft", "latency"):
        for quantile in SUMMARY_QUANTILES:
            fields[f"{prefix}_p{int(quantile * 100)}_ms"] = serializers.FloatField(allow_null=True)
    return fields


class TenantLabelSerializer(serializers.Serializer):
    id = serializers.IntegerField(allow_null=True, help_text="null: usage not allocated to a tenant.")
    slug = serializers.CharField(allow_null=True)


class ModelVersionLabelSerializer(serializers.Serializer):
    id = serializers.IntegerField(allow_null=True)
    name = serializers.CharField(allow_null=True, help_text="model@version; null once the version is gone.")


def _label_fields(names) -> dict:
    """The one grouping column a row carries, named after `by`."""
    kinds = {"tenant": TenantLabelSerializer(required=False),
             "model_version": ModelVersionLabelSerializer(required=False),
             "quantization": serializers.CharField(required=False, allow_null=True),
             "key": serializers.CharField(required=False, allow_null=True, help_text="API key prefix."),
             "day": serializers.DateField(required=False, allow_null=True)}
    return {name: kinds[name] for name in names}


class _Envelope(serializers.Serializer):
    granularity = serializers.ChoiceField(choices=Granularity.choices)
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()


class UsagePointSerializer(_figures({"period_start": serializers.DateTimeField(), **_totals_fields()})):  # type: ignore[misc]  # a base built by type()
    pass


class UsageSeriesSerializer(_Envelope):
    points = UsagePointSerializer(many=True)


class UsageRowSerializer(_figures({**_label_fields(BREAKDOWNS), **_totals_fields()})):  # type: ignore[misc]  # a base built by type()
    pass


class UsageBreakdownSerializer(_Envelope):
    by = serializers.ChoiceField(choices=list(BREAKDOWNS))
    rows = UsageRowSerializer(many=True)


def _money(**kwargs):
    return serializers.DecimalField(max_digits=30, decimal_places=6, coerce_to_string=True, **kwargs)


class CostRowSerializer(_figures({  # type: ignore[misc]  # a base built by type()
        **_label_fields(COST_BREAKDOWNS), "completions": serializers.IntegerField(),
        "tokens": serializers.IntegerField(),
        "gpu_hours": _money(help_text="GPU time held (instances with a GPU type)."),
        "cpu_core_hours": _money(help_text="CPU core time held (instances without a GPU: no GPU type, or cpu)."),
        "usage_cost_usd": _money(), "idle_cost_usd": _money(),
        "warm_cost_usd": _money(help_text="Of the idle cost, what warm instances (started, not routed) cost."),
        "total_cost_usd": _money(),
        **{name: _money(allow_null=True) for name in (
            "cost_per_completion_usd", "total_cost_per_completion_usd", "cost_per_1k_tokens_usd",
            "total_cost_per_1k_tokens_usd", "cost_per_accepted_completion_usd")},
        "feedback_accepted": serializers.IntegerField(), "acceptance_ratio": serializers.FloatField(allow_null=True)})):
    pass


class UsageCostSerializer(_Envelope):
    by = serializers.ChoiceField(choices=list(COST_BREAKDOWNS))
    rows = CostRowSerializer(many=True)


class BudgetRowSerializer(serializers.Serializer):
    tenant = serializers.SlugField()
    over_budget = serializers.BooleanField()
    reason = serializers.CharField(allow_null=True)
    since = serializers.DateTimeField(allow_null=True)
    checked_at = serializers.DateTimeField(allow_null=True)
    tokens_month_to_date = serializers.IntegerField()
    cost_month_to_date_usd = _money()


class BudgetStatesSerializer(serializers.Serializer):
    rows = BudgetRowSerializer(many=True)


class BudgetQuerySerializer(serializers.Serializer):
    tenant = serializers.SlugField(required=False, help_text="Tenant slug; default: every tenant you may read.")
