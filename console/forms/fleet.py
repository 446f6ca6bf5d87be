"""Deploying and scaling from the console."""
from django import forms

from fleet.models import MAX_REPLICAS, BuiltinRuntime
from fleet.runtime import backend_choices
from models_registry.models import Model, ModelVersion, VersionStatus


def _count(label: str, initial: int, minimum: int = 0) -> forms.IntegerField:
    return forms.IntegerField(label=label, initial=initial, min_value=minimum, max_value=MAX_REPLICAS)


class DeployForm(forms.Form):
    tenant = forms.ChoiceField(help_text="Shared pools serve every tenant; only platform admins create them.")
    name = forms.SlugField(max_length=63)
    model_version = forms.ModelChoiceField(queryset=ModelVersion.objects.none(), label="Model version")
    runtime_backend = forms.ChoiceField(choices=backend_choices, initial=BuiltinRuntime.SIMULATOR)
    min_replicas = _count("Minimum replicas", 1)
    max_replicas = _count("Maximum replicas", 1, 1)
    warm_pool_size = _count("Warm pool", 0)
    gpu_type = forms.CharField(label="GPU type", required=False, max_length=64, help_text="Empty or “cpu” for CPU.")
    # A choice of registered models; fleet.validation still checks it (not the deployment's own model), as for the API.
    fallback_model_name = forms.ChoiceField(
        label="Fallback model", required=False,
        help_text="Where the gateway sends requests while this deployment is saturated or slow to answer.")

    def __init__(self, *args, tenants=(), shared=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tenant"].choices = ([("", "Shared pool")] if shared else []) + [(t.slug, t.slug) for t in tenants]
        self.fields["model_version"].queryset = ModelVersion.objects.select_related("model").filter(
            status=VersionStatus.PUBLISHED).order_by("model__name", "-created_at")
        self.fields["fallback_model_name"].choices = [("", "None")] + [
            (name, name) for name in Model.objects.order_by("name").values_list("name", flat=True)]


class ScaleForm(forms.Form):
    min_replicas = _count("Minimum replicas", 1)
    max_replicas = _count("Maximum replicas", 1, 1)
    warm_pool_size = _count("Warm pool", 0)
