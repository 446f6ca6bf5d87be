"""The capacity page's forms: a plan's inputs (GET, bookmarkable) and a GPU type (platform admins)."""
from django import forms

from capacity.models import GpuType
from models_registry.models import ModelVersion, VersionStatus

CPU = "cpu"
PLAN_FIELDS = ("model_version", "gpu_type", "kv_space_gib", "context_length", "developers", "concurrency_ratio",
               "prompt_tokens", "completion_tokens", "traffic", "tenant", "gpu_memory_utilization", "redundancy")


class PlanForm(forms.Form):
    model_version = forms.ModelChoiceField(
        ModelVersion.objects.select_related("model").exclude(status=VersionStatus.RETIRED).order_by(
            "model__name", "-created_at"), label="Model version",
        help_text="Its config.json (and weights) are read from its artifact directory.")
    gpu_type = forms.ChoiceField(label="GPU type", help_text="Or “CPU engine” to size a CPU vLLM by its KV space.")
    kv_space_gib = forms.FloatField(label="CPU KV space (GiB)", required=False, min_value=0.0625, max_value=65536,
                                    help_text="VLLM_CPU_KVCACHE_SPACE; only for a CPU engine.")
    context_length = forms.IntegerField(label="Context length (tokens)", required=False, min_value=16,
                                        max_value=1_048_576, help_text="Empty: the version's max_model_len.")
    developers = forms.IntegerField(min_value=1, max_value=1_000_000, initial=50)
    concurrency_ratio = forms.FloatField(label="In flight at peak per developer", min_value=0.001, max_value=1,
                                         initial=0.24, help_text="Seed practice: 50 developers → 8–12 in flight.")
    prompt_tokens = forms.IntegerField(label="Prompt tokens", min_value=1, max_value=1_048_576, initial=1500)
    completion_tokens = forms.IntegerField(label="Completion tokens", min_value=1, max_value=1_048_576, initial=64)
    traffic = forms.ChoiceField(label="Traffic profile", choices=[("seed", "Seed practice (the figures above)"),
                                                                  ("usage", "This install's usage (last 7 days)")],
                                initial="seed")
    tenant = forms.ChoiceField(label="Usage of", required=False)
    gpu_memory_utilization = forms.FloatField(label="gpu_memory_utilization", min_value=0.1, max_value=0.99,
                                              initial=0.90)
    redundancy = forms.IntegerField(label="Spare replicas", min_value=0, max_value=16, initial=1,
                                    help_text="1: N+1, one engine may fail at peak.")

    def __init__(self, *args, tenants=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["gpu_type"].choices = [(t.name, f"{t.name} ({t.memory_mib / 1024:.0f} GiB)")
                                           for t in GpuType.objects.all()] + [(CPU, "CPU engine")]
        self.fields["tenant"].choices = [("", "every tenant I may read")] + [(t.slug, t.name) for t in tenants]

    def clean(self):
        data = super().clean()
        if data.get("gpu_type") == CPU and data.get("kv_space_gib") is None:
            self.add_error("kv_space_gib", "A CPU engine needs its KV space.")
        return data

    def request_data(self) -> dict:
        """The plan request as the REST API takes it."""
        data = {name: value for name, value in self.cleaned_data.items() if value not in (None, "")}
        data["model_version"] = data["model_version"].pk
        if data.get("gpu_type") == CPU:
            data.pop("gpu_type")
        else:
            data.pop("kv_space_gib", None)
        return data


class GpuTypeForm(forms.Form):
    name = forms.RegexField(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", max_length=64,
                            error_messages={"invalid": "Letters, digits, '.', '_' and '-', starting with a letter "
                                                       "or digit."},
                            help_text="As the GPU price table and deployments name it.")
    memory_mib = forms.IntegerField(label="Memory (MiB)", min_value=1024, max_value=16 * 1024 * 1024,
                                    help_text="Total, as nvidia-smi reports it (an 80 GB card: 81559).")
    note = forms.CharField(max_length=200, required=False)
