"""Rollouts over REST."""
from rest_framework import serializers

from rollouts.models import DEFAULT_GRACE_SECONDS, Rollout, RolloutStrategy, StickyBy

MAX_GRACE_SECONDS = 30 * 24 * 3600


class RolloutSerializer(serializers.ModelSerializer):
    tenant: serializers.SlugRelatedField = serializers.SlugRelatedField(
        source="deployment.tenant", slug_field="slug", read_only=True, allow_null=True,
        help_text="Tenant slug; null for a shared pool.")
    deployment_name = serializers.CharField(source="deployment.name", read_only=True)
    from_version_label = serializers.CharField(source="from_version.version", read_only=True)
    to_version_label = serializers.CharField(source="to_version.version", read_only=True)
    stages = serializers.ListField(child=serializers.DictField(), read_only=True,
                                   help_text='[{"weight": 0.1, "bake_seconds": 900}, …]')
    gates = serializers.DictField(read_only=True)
    baseline = serializers.DictField(read_only=True, help_text="The old version's figures before traffic moved.")
    last_evaluation = serializers.DictField(read_only=True, help_text="The latest gate figures and verdict.")
    grace = serializers.SerializerMethodField(
        help_text="After a promotion: the old version's engines kept warm, their warm seconds and idle cost so far, "
                  "the hourly rate now and when they are retired (null otherwise).")

    class Meta:
        model = Rollout
        fields = ["id", "tenant", "deployment", "deployment_name", "from_version", "from_version_label", "to_version",
                  "to_version_label", "strategy", "stages", "gates", "sticky_by", "grace_seconds", "state",
                  "state_reason", "stage_index", "weight", "stage_started_at", "baseline", "last_evaluation",
                  "reverses", "created_by", "created_at", "updated_at", "promoted_at", "finished_at",
                  "previous_retired_at", "grace"]
        read_only_fields = fields

    def get_grace(self, rollout) -> dict | None:
        from rollouts.selectors import grace_cost

        found = grace_cost(rollout)
        return None if found is None else {**found, "retire_at": found["retire_at"].isoformat(),
                                           "retired_at": found["retired_at"] and found["retired_at"].isoformat()}


class StageSerializer(serializers.Serializer):
    weight = serializers.FloatField(min_value=0, max_value=1, help_text="The new version's share of traffic.")
    bake_seconds = serializers.IntegerField(min_value=0, default=900, help_text="How long every gate must hold.")


class RolloutCreateSerializer(serializers.Serializer):
    deployment = serializers.IntegerField(min_value=1)
    to_version = serializers.IntegerField(min_value=1, help_text="A published version of the deployment's model.")
    strategy = serializers.ChoiceField(choices=RolloutStrategy.choices, default=RolloutStrategy.CANARY)
    stages = StageSerializer(many=True, required=False,
                             help_text="Default: 10 % → 50 % → 100 % (canary), 100 % (blue-green).")
    gates = serializers.DictField(required=False, help_text="rollouts.gates.Gates fields (docs/rollouts.md).")
    sticky_by = serializers.ChoiceField(choices=StickyBy.choices, default=StickyBy.SESSION)
    grace_seconds = serializers.IntegerField(min_value=0, max_value=MAX_GRACE_SECONDS, default=DEFAULT_GRACE_SECONDS)


class RollbackSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=200, required=False, allow_blank=True)
