"""API key serializers. The secret appears only in the create/rotate response, never in reads."""
from drf_spectacular.utils import OpenApiExample, extend_schema_serializer
from rest_framework import serializers

from apikeys.models import ApiKey
from apikeys.scopes import Scope
from tenants.roles import Role

# What ApiKey.state() answers.
KEY_STATES = [("active", "Active"), ("expired", "Expired"), ("revoked", "Revoked")]


class ApiKeySerializer(serializers.ModelSerializer):
    state = serializers.ChoiceField(choices=KEY_STATES, read_only=True)  # ApiKey.state(), called by DRF
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=Scope.choices), read_only=True)
    # null for a service key (no owner) and for a key that was not rotated from another.
    user_id = serializers.IntegerField(source="user.pk", read_only=True, default=None, allow_null=True)
    username = serializers.CharField(source="user.username", read_only=True, default=None, allow_null=True)
    rotated_from = serializers.CharField(source="rotated_from.prefix", read_only=True, default=None, allow_null=True,
                                         help_text="Prefix of the key this one replaced.")

    class Meta:
        model = ApiKey
        fields = ["id", "name", "prefix", "role", "scopes", "state", "user_id", "username", "created_at",
                  "expires_at", "revoked_at", "last_used_at", "rotated_from"]
        read_only_fields = fields


@extend_schema_serializer(examples=[
    OpenApiExample("Your own inference key", value={"name": "laptop", "scopes": ["inference"]}, request_only=True),
    OpenApiExample("A service key for CI", value={"name": "ci", "scopes": ["inference", "admin"], "role": "developer"},
                   request_only=True)])
class ApiKeyCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=Scope.choices), min_length=1, max_length=3)
    role = serializers.ChoiceField(choices=Role.choices, required=False,
                                   help_text="Highest role the key acts with; never above your own. "
                                             "Default: developer.")
    # Bounded to a database id: a larger number would overflow the query instead of failing validation.
    user_id = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=2**63 - 1,
                                       help_text="Member the key belongs to; omit for a service key.")
    expires_at = serializers.DateTimeField(required=False, allow_null=True)


@extend_schema_serializer(examples=[OpenApiExample(
    "A key for the platform's CI", value={"name": "terraform", "expires_at": "2027-01-01T00:00:00Z"},
    request_only=True)])
class PlatformKeyCreateSerializer(serializers.Serializer):
    """A platform key: the `admin` scope, no tenant, owned by the platform admin who mints it."""

    name = serializers.CharField(max_length=100)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)


class ApiKeyRotateSerializer(serializers.Serializer):
    grace_seconds = serializers.IntegerField(required=False, min_value=0, max_value=30 * 24 * 3600,
                                             help_text="How long the old key keeps working (default 86400).")


class MintedKeySerializer(ApiKeySerializer):
    key = serializers.CharField(help_text="The secret. Shown once; store it now.")

    class Meta(ApiKeySerializer.Meta):
        fields = ApiKeySerializer.Meta.fields + ["key"]
        read_only_fields = fields


def minted_response(minted) -> dict:
    data = ApiKeySerializer(minted.api_key).data
    data["key"] = minted.raw
    return data
