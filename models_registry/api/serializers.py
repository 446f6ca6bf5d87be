"""Registry serializers. Writable fields are listed explicitly; deep checks live in the services."""
from rest_framework import serializers

from controlplane.api.fields import storable_json
from controlplane.api.restricted import RestrictedFieldsMixin
from models_registry.models import Model, ModelFamily, ModelVersion, Quantization
from models_registry.profiles import effective_engine_args


class ModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = Model
        fields = ["id", "name", "family", "description", "created_at"]
        read_only_fields = fields


class ModelCreateSerializer(serializers.Serializer):
    name = serializers.RegexField(r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$", max_length=200,
                                  help_text="What clients put in `model`; letters, digits, . _ : / -")
    family = serializers.ChoiceField(choices=ModelFamily.choices, default=ModelFamily.OTHER)
    description = serializers.CharField(required=False, allow_blank=True, default="")

    def validate_name(self, value):
        if Model.objects.filter(name=value).exists():
            raise serializers.ValidationError("A model with this name already exists.")
        return value


class ModelUpdateSerializer(serializers.Serializer):
    family = serializers.ChoiceField(choices=ModelFamily.choices, required=False)
    description = serializers.CharField(required=False, allow_blank=True)


class ModelVersionSerializer(RestrictedFieldsMixin, serializers.ModelSerializer):
    # Where the weights live and how the engine is started: null without VIEW_REGISTRY_INTERNALS anywhere.
    field_rule = "model_version"
    model = serializers.CharField(source="model.name", read_only=True)
    engine_args = serializers.DictField(read_only=True)
    effective_engine_args = serializers.SerializerMethodField()

    class Meta:
        model = ModelVersion
        fields = ["id", "model", "version", "status", "artifact_uri", "checksum", "quantization", "dtype",
                  "max_context", "engine_args", "effective_engine_args", "fim_template", "created_at", "published_at"]
        read_only_fields = fields

    def get_effective_engine_args(self, version) -> dict:
        return effective_engine_args(version)


class ModelVersionUpdateSerializer(serializers.Serializer):
    """Drafts only (the service refuses anything else). engine_args is checked against the allow-list there."""

    artifact_uri = serializers.CharField(max_length=1000, required=False)
    checksum = serializers.CharField(max_length=200, required=False, allow_blank=True)
    quantization = serializers.ChoiceField(choices=Quantization.choices, required=False)
    dtype = serializers.CharField(max_length=16, required=False)
    engine_args = serializers.DictField(required=False, validators=[storable_json],
                                        help_text="vLLM flags overriding the serving profile (allow-listed).")
    fim_template = serializers.CharField(
        max_length=500, required=False, allow_blank=True, trim_whitespace=False,
        help_text="Fill-in-the-middle template holding {prefix} and {suffix} once each, e.g. "
                  "'<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>'; blank: the model family's (docs/fim.md).")


class ModelVersionCreateSerializer(ModelVersionUpdateSerializer):
    version = serializers.RegexField(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$", max_length=64)
    artifact_uri = serializers.CharField(max_length=1000)
