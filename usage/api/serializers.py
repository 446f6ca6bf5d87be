"""Query parameters and GPU price payloads of /api/v1/usage/."""
from datetime import timedelta

from django.utils import timezone
from rest_framework import serializers

from usage.models import GpuPrice, Granularity, PriceUnit
from usage.periods import DAY, HOUR, floor_day, floor_hour
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
    effective_from = serializers.DateTimeField(required=False, help_text="Default: now. Earlier hours keep their price.")
    note = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")
