"""Tenant and member serializers. Writable fields are listed explicitly: nothing else can be set."""
from django.contrib.auth import get_user_model
from drf_spectacular.utils import OpenApiExample, extend_schema_serializer
from rest_framework import serializers

from tenants.models import Invitation, Isolation, Membership, RedactionMode, Tenant, slug_validator
from tenants.roles import Perm, Role


class TenantSerializer(serializers.ModelSerializer):
    class Meta:
        model = Tenant
        fields = ["slug", "name", "status", "region", "isolation", "redaction_mode", "cancel_superseded", "created_at",
                  "updated_at"]
        read_only_fields = fields


@extend_schema_serializer(examples=[OpenApiExample(
    "A shared-pool tenant",
    value={"slug": "acme", "name": "Acme", "region": "eu-west", "admin_email": "it@acme.example"}, request_only=True)])
class TenantCreateSerializer(serializers.Serializer):
    """Platform admins only. The first owner is invited by e-mail (a one-time link)."""

    slug = serializers.CharField(max_length=63, validators=[slug_validator])
    name = serializers.CharField(max_length=200)
    admin_email = serializers.EmailField(help_text="The tenant's first owner: invited by e-mail with a one-time link.")
    region = serializers.CharField(max_length=64, required=False, default="local")
    isolation = serializers.ChoiceField(choices=Isolation.choices, required=False, default=Isolation.SHARED)

    def validate_slug(self, value):
        if Tenant.objects.filter(slug=value).exists():
            raise serializers.ValidationError("A tenant with this slug already exists.")
        return value


class TenantCreatedSerializer(TenantSerializer):
    owner_invitation = serializers.SerializerMethodField(help_text="The first owner's pending invitation.")

    class Meta(TenantSerializer.Meta):
        fields = TenantSerializer.Meta.fields + ["owner_invitation"]
        read_only_fields = fields

    def get_owner_invitation(self, tenant) -> dict | None:
        invitation = tenant.invitations.filter(role=Role.OWNER, status="pending").first()
        return InvitationSerializer(invitation).data if invitation else None


class TenantUpdateSerializer(serializers.Serializer):
    """Tenant admins may rename their tenant and choose its redaction mode and supersession setting; region and
    isolation are the platform's call."""

    name = serializers.CharField(max_length=200, required=False)
    redaction_mode = serializers.ChoiceField(choices=RedactionMode.choices, required=False)
    cancel_superseded = serializers.BooleanField(
        required=False, help_text="Cancel an editor session's older interactive completion when a newer one arrives.")


class PlatformTenantUpdateSerializer(TenantUpdateSerializer):
    region = serializers.CharField(max_length=64, required=False)
    isolation = serializers.ChoiceField(choices=Isolation.choices, required=False)


class MembershipSerializer(serializers.ModelSerializer):
    user_id = serializers.IntegerField(source="user.pk", read_only=True)
    username = serializers.CharField(source="user.username", read_only=True)
    email = serializers.EmailField(source="user.email", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "user_id", "username", "email", "role", "created_at", "updated_at"]
        read_only_fields = fields


@extend_schema_serializer(examples=[OpenApiExample(
    "Invite a viewer", value={"email": "new.member@example.test", "role": "viewer"}, request_only=True)])
class MembershipCreateSerializer(serializers.Serializer):
    """An invitation: the same answer whether or not an account has the address (docs/roles.md)."""

    email = serializers.EmailField()
    username = serializers.CharField(max_length=150, required=False,
                                     help_text="Username for an account created on acceptance; never looked up.")
    role = serializers.ChoiceField(choices=Role.choices)

    def validate_username(self, value):
        get_user_model().username_validator(value)
        return value


class MembershipUpdateSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices)


class InvitationSerializer(serializers.ModelSerializer):
    """What the inviter typed and where it stands; nothing about any account."""

    class Meta:
        model = Invitation
        fields = ["id", "email", "role", "status", "created_at", "expires_at"]
        read_only_fields = fields


class GrantSerializer(serializers.Serializer):
    """One per-object grant: a member holds `permission` in this tenant whatever their role."""

    id = serializers.IntegerField(read_only=True)
    user_id = serializers.IntegerField(source="user.pk", read_only=True)
    username = serializers.CharField(source="user.username", read_only=True)
    permission = serializers.CharField(source="permission.codename", read_only=True)


@extend_schema_serializer(examples=[OpenApiExample(
    "Let one developer read the audit trail", value={"user_id": 42, "permission": "view_audit"}, request_only=True)])
class GrantCreateSerializer(serializers.Serializer):
    user_id = serializers.IntegerField(min_value=1, max_value=2**63 - 1, help_text="A member of this tenant.")
    permission = serializers.ChoiceField(choices=Perm.choices)
