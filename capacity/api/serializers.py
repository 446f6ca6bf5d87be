"""The capacity API's bodies: GPU types, a plan request and the plan it answers, deployment advice."""
from rest_framework import serializers

from capacity.advice import Severity
from capacity.architecture import DTYPE_BYTES
from capacity.models import GpuType
from models_registry.models import ModelVersion, Quantization

BLOCK_SIZES = (8, 16, 32, 64, 128, 256)


class GpuTypeSerializer(serializers.ModelSerializer):
    hourly_usd = serializers.SerializerMethodField(help_text="The GPU price table's price in force (usage app).")

    class Meta:
        model = GpuType
        fields = ["id", "name", "memory_mib", "note", "hourly_usd", "created_at", "updated_at"]
        read_only_fields = ["id", "hourly_usd", "created_at", "updated_at"]

    def get_hourly_usd(self, gpu_type) -> str | None:
        price = gpu_type.current_price()
        return None if price is None else str(price.hourly_usd)


class GpuTypeWriteSerializer(serializers.Serializer):
    name = serializers.RegexField(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", max_length=64)
    memory_mib = serializers.IntegerField(min_value=1024, max_value=16 * 1024 * 1024)
    note = serializers.CharField(max_length=200, required=False, allow_blank=True)


class PlanRequestSerializer(serializers.Serializer):
    """One of model_version / config; one of gpu_type / kv_space_gib; the traffic from seed ratios or usage."""

    model_version = serializers.PrimaryKeyRelatedField(
        queryset=ModelVersion.objects.select_related("model"), required=False,
        help_text="A registered version with a local artifact: its config.json (and safetensors) are read.")
    config = serializers.DictField(required=False, help_text="A model's config.json, pasted (not registered).")
    name = serializers.CharField(max_length=200, required=False, help_text="A label for a pasted config.")
    dtype = serializers.ChoiceField(choices=["auto", *sorted(DTYPE_BYTES)], required=False,
                                    help_text="For a pasted config; a version's own dtype is used otherwise.")
    quantization = serializers.ChoiceField(choices=Quantization.choices, required=False)
    gpu_type = serializers.CharField(max_length=64, required=False, help_text="A GPU type's name (any case).")
    kv_space_gib = serializers.FloatField(min_value=0.0625, max_value=65536, required=False,
                                          help_text="CPU engines: VLLM_CPU_KVCACHE_SPACE, instead of a GPU.")
    context_length = serializers.IntegerField(min_value=16, max_value=1_048_576, required=False,
                                              help_text="max_model_len to plan for; default: the version's.")
    traffic = serializers.ChoiceField(choices=["seed", "usage"], default="seed")
    developers = serializers.IntegerField(min_value=1, max_value=1_000_000, required=False)
    concurrency_ratio = serializers.FloatField(min_value=0.001, max_value=1.0, default=0.24)
    prompt_tokens = serializers.IntegerField(min_value=1, max_value=1_048_576, default=1500)
    completion_tokens = serializers.IntegerField(min_value=1, max_value=1_048_576, default=64)
    tenant = serializers.SlugField(required=False, help_text="traffic=usage: this tenant's requests.")
    deployment = serializers.IntegerField(min_value=1, required=False,
                                          help_text="traffic=usage: this deployment's requests.")
    history_days = serializers.IntegerField(min_value=1, max_value=31, default=7)
    gpu_memory_utilization = serializers.FloatField(min_value=0.1, max_value=0.99, default=0.90)
    reserve_gib = serializers.FloatField(min_value=0, max_value=64, default=2.0)
    tensor_parallel_size = serializers.IntegerField(min_value=1, max_value=64, default=1)
    block_size = serializers.ChoiceField(choices=BLOCK_SIZES, default=16)
    redundancy = serializers.IntegerField(min_value=0, max_value=16, default=1)
    max_concurrency_per_replica = serializers.IntegerField(min_value=1, max_value=100_000, required=False)

    def validate(self, attrs):
        if ("model_version" in attrs) == ("config" in attrs):
            raise serializers.ValidationError({"model_version": "Name a model_version, or paste a config (one)."})
        if ("gpu_type" in attrs) == ("kv_space_gib" in attrs):
            raise serializers.ValidationError({"gpu_type": "Name a gpu_type, or kv_space_gib for a CPU engine (one)."})
        if "context_length" not in attrs:
            if "model_version" not in attrs:
                raise serializers.ValidationError({"context_length": "Required with a pasted config."})
            from models_registry.profiles import effective_engine_args

            attrs["context_length"] = effective_engine_args(attrs["model_version"])["max_model_len"]
        if attrs["traffic"] == "usage" and "tenant" in attrs and "deployment" in attrs:
            raise serializers.ValidationError({"tenant": "Read the usage of a tenant or of a deployment, not both."})
        return attrs


class ModelFactsSerializer(serializers.Serializer):
    name = serializers.CharField()
    layers = serializers.IntegerField()
    kv_heads = serializers.IntegerField()
    head_dim = serializers.IntegerField()
    kv_dtype_bytes = serializers.IntegerField()
    parameters = serializers.IntegerField()
    weight_bytes = serializers.IntegerField()
    weights_source = serializers.CharField()
    max_position_embeddings = serializers.IntegerField(allow_null=True)


class GpuFactsSerializer(serializers.Serializer):
    name = serializers.CharField()
    memory_bytes = serializers.IntegerField()
    hourly_usd = serializers.CharField(allow_null=True)


class TrafficSerializer(serializers.Serializer):
    developers = serializers.IntegerField()
    peak_concurrency = serializers.FloatField(help_text="Requests in flight at peak (p99) to plan for.")
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    completions_per_month = serializers.IntegerField()
    profile = serializers.CharField(help_text="Where the figures come from: the seed practice or usage history.")


class PlanSettingsSerializer(serializers.Serializer):
    context_length = serializers.IntegerField()
    gpu_memory_utilization = serializers.FloatField()
    reserve_bytes = serializers.IntegerField()
    kv_space_bytes = serializers.IntegerField(allow_null=True)
    tensor_parallel_size = serializers.IntegerField()
    block_size = serializers.IntegerField()
    redundancy = serializers.IntegerField()
    max_concurrency_per_replica = serializers.IntegerField(allow_null=True)


class MemoryBudgetSerializer(serializers.Serializer):
    total = serializers.IntegerField()
    usable = serializers.IntegerField()
    weights = serializers.IntegerField()
    reserve = serializers.IntegerField()
    kv_cache = serializers.IntegerField()


class PlanFiguresSerializer(serializers.Serializer):
    kv_bytes_per_token = serializers.IntegerField()
    memory = MemoryBudgetSerializer(allow_null=True, help_text="Per GPU; null for a CPU engine's KV space.")
    kv_space_bytes = serializers.IntegerField()
    kv_tokens = serializers.IntegerField()
    kv_blocks = serializers.IntegerField()
    fits = serializers.BooleanField()
    max_sequences_at_context = serializers.FloatField()
    sequences_at_typical_length = serializers.IntegerField()
    max_model_len = serializers.IntegerField()
    max_num_seqs = serializers.IntegerField()
    max_num_batched_tokens = serializers.IntegerField()
    concurrency_per_replica = serializers.IntegerField()
    replicas_for_peak = serializers.IntegerField()
    replicas = serializers.IntegerField()
    gpus = serializers.IntegerField()
    peak_utilization = serializers.FloatField()
    cost_per_month_usd = serializers.CharField(allow_null=True)
    cost_per_completion_usd = serializers.CharField(allow_null=True)
    notes = serializers.ListField(child=serializers.CharField())


class PlanSerializer(serializers.Serializer):
    model = ModelFactsSerializer()
    gpu = GpuFactsSerializer(allow_null=True)
    traffic = TrafficSerializer()
    settings = PlanSettingsSerializer()
    plan = PlanFiguresSerializer()


class AdviceItemSerializer(serializers.Serializer):
    code = serializers.CharField()
    severity = serializers.ChoiceField(choices=Severity.choices)
    title = serializers.CharField()
    detail = serializers.CharField()


class AdviceSerializer(serializers.Serializer):
    deployment = serializers.IntegerField()
    window_seconds = serializers.IntegerField()
    samples = serializers.IntegerField()
    prefix_cache_hit_ratio = serializers.FloatField(allow_null=True)
    advice = AdviceItemSerializer(many=True)
