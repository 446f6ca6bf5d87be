"""Quota policy serializers: every limit validated with the field named in the error."""
from drf_spectacular.utils import OpenApiExample, extend_schema_serializer
from rest_framework import serializers

from quotas.models import (
    LIMIT_BOUNDS,
    MAX_ALLOWED_MODELS,
    MAX_CAPACITY,
    MAX_MONTHLY_BUDGET_USD,
    MODEL_NAME_PATTERN,
    QuotaPolicy,
    QuotaSubject,
)


def _limit(name: str):
    return serializers.IntegerField(required=False, allow_null=True, min_value=0, max_value=LIMIT_BOUNDS[name])


class QuotaPolicySerializer(serializers.ModelSerializer):
    subject = serializers.ChoiceField(choices=QuotaSubject.choices, read_only=True)
    # Ids are bounded to the database's range: a larger number would overflow the query, not fail validation.
    api_key_id = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=2**63 - 1)
    api_key_prefix = serializers.CharField(source="api_key.prefix", read_only=True, default=None, allow_null=True)
    user_id = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=2**63 - 1)
    requests_per_minute = _limit("requests_per_minute")
    tokens_per_minute = _limit("tokens_per_minute")
    max_concurrent_requests = _limit("max_concurrent_requests")
    monthly_token_budget = _limit("monthly_token_budget")
    monthly_budget_usd = serializers.DecimalField(
        max_digits=14, decimal_places=2, required=False, allow_null=True, min_value=0, max_value=MAX_MONTHLY_BUDGET_USD)
    allowed_models = serializers.ListField(
        child=serializers.RegexField(MODEL_NAME_PATTERN, max_length=200), required=False, allow_null=True,
        max_length=MAX_ALLOWED_MODELS)
    max_instances = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_CAPACITY,
        help_text="Tenant-wide: instances its deployments may run together (platform admins only).")
    max_gpus = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_CAPACITY,
        help_text="Tenant-wide: GPUs its deployments may hold together (platform admins only).")

    class Meta:
        model = QuotaPolicy
        fields = ["id", "subject", "api_key_id", "api_key_prefix", "user_id", "requests_per_minute",
                  "tokens_per_minute", "max_concurrent_requests", "monthly_token_budget", "monthly_budget_usd",
                  "allowed_models", "max_instances", "max_gpus", "created_at", "updated_at"]
        read_only_fields = ["id", "subject", "api_key_prefix", "created_at", "updated_at"]


@extend_schema_serializer(examples=[OpenApiExample(
    "Raise the rate, lift the token cap", value={"requests_per_minute": 600, "tokens_per_minute": None},
    request_only=True)])
class QuotaPolicyUpdateSerializer(QuotaPolicySerializer):
    """The subject (key / user) of a policy is fixed once created."""

    # Declared again, read-only: Meta.read_only_fields does not apply to fields declared on the class, so
    # these were documented (and accepted, then ignored) as writable.
    api_key_id = serializers.IntegerField(read_only=True, allow_null=True)
    user_id = serializers.IntegerField(read_only=True, allow_null=True)
