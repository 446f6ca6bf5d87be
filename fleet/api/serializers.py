"""Deployments and instances over REST."""
from drf_spectacular.utils import OpenApiExample, extend_schema_serializer
from rest_framework import serializers

from controlplane.api.fields import storable_json
from controlplane.api.restricted import RestrictedFieldsMixin
from fleet.autoscaling.schedule import MAX_LEAD_SECONDS
from fleet.models import (
    MAX_PARALLEL_PRODUCT,
    MAX_REPLICAS,
    BuiltinRuntime,
    DemandSample,
    Deployment,
    Instance,
    RoutingPolicyName,
    ScalingDecision,
    ScalingPolicy,
)
from fleet.runtime import backend_choices


class InstanceSerializer(RestrictedFieldsMixin, serializers.ModelSerializer):
    # Engine internals (log tail, endpoint, pid, failure details) are null without VIEW_FLEET_INTERNALS.
    field_rule = "instance"
    pid = serializers.SerializerMethodField()
    metrics = serializers.DictField(read_only=True, help_text="The engine's last scraped metrics.")
    model_version = serializers.IntegerField(source="version_id", read_only=True,
                                             help_text="The model version this engine runs (two during a rollout).")

    class Meta:
        model = Instance
        fields = ["id", "state", "role", "model_version", "pending_reason", "endpoint_url", "port", "pid",
                  "restart_count", "next_start_after",
                  "created_at", "starting_at", "ready_at", "draining_at", "drain_deadline", "stopped_at", "failed_at",
                  "released_at", "consecutive_health_failures", "last_health_at", "last_health_ok",
                  "last_health_error", "metrics", "failure_reason", "log_tail"]
        read_only_fields = fields

    def get_pid(self, instance) -> int | None:
        return (instance.runtime_handle or {}).get("pid")

    def row_tenant(self, instance):
        return instance.deployment.tenant


class DeploymentSerializer(serializers.ModelSerializer):
    tenant: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True, help_text="Tenant slug; null for a shared pool.")
    simulator_params = serializers.DictField(read_only=True)
    model = serializers.CharField(source="model_version.model.name", read_only=True)
    model_version_label = serializers.CharField(source="model_version.version", read_only=True)
    instances = InstanceSerializer(many=True, read_only=True)

    class Meta:
        model = Deployment
        fields = ["id", "tenant", "name", "model", "model_version", "model_version_label", "runtime_backend",
                  "min_replicas", "max_replicas", "warm_pool_size", "serving_replicas", "target_replicas",
                  "tensor_parallel_size",
                  "pipeline_parallel_size", "gpu_type", "region", "status", "simulator_params", "fallback_model_name",
                  "routing_policy", "created_at",
                  "updated_at", "instances"]
        read_only_fields = fields


class DeploymentCreateSerializer(serializers.Serializer):
    tenant = serializers.CharField(required=False, allow_null=True, help_text="Tenant slug; omit for a shared pool.")
    name = serializers.SlugField(max_length=63)
    model_version = serializers.IntegerField(min_value=1)
    runtime_backend = serializers.ChoiceField(choices=backend_choices(), default=BuiltinRuntime.LOCAL,
                                              help_text="A runtime backend configured in SWITCHYARD_RUNTIME_BACKENDS.")
    min_replicas = serializers.IntegerField(min_value=0, max_value=MAX_REPLICAS, default=1)
    max_replicas = serializers.IntegerField(min_value=0, max_value=MAX_REPLICAS, required=False)
    warm_pool_size = serializers.IntegerField(min_value=0, max_value=MAX_REPLICAS, default=0)
    tensor_parallel_size = serializers.IntegerField(min_value=1, max_value=MAX_PARALLEL_PRODUCT, default=1)
    pipeline_parallel_size = serializers.IntegerField(min_value=1, max_value=MAX_PARALLEL_PRODUCT, default=1)
    gpu_type = serializers.CharField(max_length=64, required=False, allow_blank=True, default="")
    region = serializers.CharField(max_length=64, required=False, allow_blank=True, default="local")
    simulator_params = serializers.DictField(required=False, default=dict, validators=[storable_json])
    fallback_model_name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="",
                                                help_text="Model the gateway uses when this one is saturated or slow.")
    routing_policy = serializers.ChoiceField(
        choices=RoutingPolicyName.choices, default=RoutingPolicyName.PREFIX_AFFINITY,
        help_text="How the gateway picks one of the deployment's engines.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["runtime_backend"].choices = backend_choices()  # the setting may change after import

    def validate(self, attrs):
        attrs.setdefault("max_replicas", max(attrs["min_replicas"], 1))
        return attrs


@extend_schema_serializer(examples=[OpenApiExample(
    "Two replicas and a warm spare", value={"min_replicas": 2, "max_replicas": 3, "warm_pool_size": 1},
    request_only=True)])
class ScaleSerializer(serializers.Serializer):
    min_replicas = serializers.IntegerField(min_value=0, max_value=MAX_REPLICAS, required=False)
    max_replicas = serializers.IntegerField(min_value=0, max_value=MAX_REPLICAS, required=False)
    warm_pool_size = serializers.IntegerField(min_value=0, max_value=MAX_REPLICAS, required=False)

    def validate(self, attrs):
        if not attrs:
            raise serializers.ValidationError("Give min_replicas, max_replicas or warm_pool_size.")
        return attrs


class RoutingSerializer(serializers.Serializer):
    routing_policy = serializers.ChoiceField(choices=RoutingPolicyName.choices,
                                             help_text="How the gateway picks one of the deployment's engines.")


class ScalingPolicySerializer(serializers.ModelSerializer):
    """A deployment's autoscaling rules; every field optional on update (PATCH semantics on PUT)."""

    queue_per_instance = serializers.FloatField(min_value=0.1, max_value=10_000, required=False)
    kv_cache_usage = serializers.FloatField(min_value=0.05, max_value=1.0, required=False)
    ttft_p95_slo_ms = serializers.FloatField(min_value=1, max_value=600_000, required=False, allow_null=True)
    up_window_seconds = serializers.IntegerField(min_value=5, max_value=3600, required=False)
    low_water_per_instance = serializers.FloatField(min_value=0, max_value=10_000, required=False)
    idle_window_seconds = serializers.IntegerField(min_value=10, max_value=86_400, required=False)
    zero_after_idle_seconds = serializers.IntegerField(min_value=10, max_value=604_800, required=False)
    cooldown_up_seconds = serializers.IntegerField(min_value=0, max_value=86_400, required=False)
    cooldown_down_seconds = serializers.IntegerField(min_value=0, max_value=86_400, required=False)
    max_step = serializers.IntegerField(min_value=1, max_value=MAX_REPLICAS, required=False)
    wake_timeout_seconds = serializers.IntegerField(min_value=1, max_value=3600, required=False)
    schedule = serializers.JSONField(
        required=False, help_text='Windows with a serving floor: [{"days": "mon-fri", "start": "09:00", "end": '
                                  '"09:30", "time_zone": "Europe/Berlin", "min_serving": 4}]; [] for none. Checked by '
                                  'fleet.services.set_scaling_policy (400 on this field).')
    schedule_lead_seconds = serializers.IntegerField(
        min_value=0, max_value=MAX_LEAD_SECONDS, required=False,
        help_text="How long before a window opens its floor applies: at least an engine's cold start.")
    updated_at = serializers.DateTimeField(read_only=True, allow_null=True,
                                           help_text="Null until a policy is set (the defaults are shown).")

    class Meta:
        model = ScalingPolicy
        fields = ["enabled", "queue_per_instance", "kv_cache_usage", "ttft_p95_slo_ms", "up_window_seconds",
                  "low_water_per_instance", "idle_window_seconds", "zero_after_idle_seconds", "cooldown_up_seconds",
                  "cooldown_down_seconds", "max_step", "wake_timeout_seconds", "schedule", "schedule_lead_seconds",
                  "last_scale_up_at",
                  "last_scale_down_at", "updated_at"]
        read_only_fields = ["last_scale_up_at", "last_scale_down_at", "updated_at"]
        extra_kwargs = {"enabled": {"required": False}}


class ScalingDecisionSerializer(serializers.ModelSerializer):
    signals = serializers.DictField(read_only=True, help_text="The latest sample the decision read.")

    class Meta:
        model = ScalingDecision
        fields = ["decided_at", "action", "rule", "from_serving", "to_serving", "reason", "signals"]
        read_only_fields = fields


class DemandSampleSerializer(serializers.ModelSerializer):
    class Meta:
        model = DemandSample
        fields = ["at", "serving", "warm", "waiting", "running", "kv_cache_usage", "ttft_p95_ms", "requests"]
        read_only_fields = fields
