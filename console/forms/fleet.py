"""Deploying and scaling from the console."""
from django import forms

from fleet.autoscaling.schedule import MAX_LEAD_SECONDS
from fleet.models import MAX_REPLICAS, BuiltinRuntime, RoutingPolicyName
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
    routing_policy = forms.ChoiceField(label="Routing", choices=RoutingPolicyName.choices, required=False,
                                       initial=RoutingPolicyName.PREFIX_AFFINITY,
                                       help_text="How the gateway picks one of the deployment's engines.")
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

    def clean_routing_policy(self) -> str:
        return self.cleaned_data["routing_policy"] or RoutingPolicyName.PREFIX_AFFINITY  # as the API's default


class ScaleForm(forms.Form):
    min_replicas = _count("Minimum replicas", 1)
    max_replicas = _count("Maximum replicas", 1, 1)
    warm_pool_size = _count("Warm pool", 0)


class RoutingForm(forms.Form):
    routing_policy = forms.ChoiceField(
        label="Routing", choices=RoutingPolicyName.choices,
        help_text="How the gateway picks one of the deployment's engines (docs/routing.md).")


class ScalingForm(forms.Form):
    """The deployment's autoscaling rules (docs/autoscaling.md); the service checks them again."""

    enabled = forms.BooleanField(label="Autoscale", required=False)
    queue_per_instance = forms.FloatField(label="Scale up at waiting requests per instance", min_value=0.1,
                                          max_value=10_000)
    kv_cache_usage = forms.FloatField(label="…or KV-cache usage (0–1)", min_value=0.05, max_value=1.0)
    ttft_p95_slo_ms = forms.FloatField(label="…or p95 TTFT above (ms, empty: no SLO)", required=False, min_value=1,
                                       max_value=600_000)
    up_window_seconds = forms.IntegerField(label="held for (s)", min_value=5, max_value=3600)
    low_water_per_instance = forms.FloatField(label="Idle below requests per instance", min_value=0, max_value=10_000)
    idle_window_seconds = forms.IntegerField(label="for (s)", min_value=10, max_value=86_400)
    zero_after_idle_seconds = forms.IntegerField(label="Scale to zero after idle (s; min 0 only)", min_value=10,
                                                 max_value=604_800)
    cooldown_up_seconds = forms.IntegerField(label="Cooldown after scaling up (s)", min_value=0, max_value=86_400)
    cooldown_down_seconds = forms.IntegerField(label="Cooldown before scaling down (s)", min_value=0,
                                               max_value=86_400)
    max_step = forms.IntegerField(label="Largest step (instances)", min_value=1, max_value=MAX_REPLICAS)
    wake_timeout_seconds = forms.IntegerField(label="A request waits for a sleeping deployment (s)", min_value=1,
                                              max_value=3600)
    schedule = forms.CharField(
        label="Scheduled windows", required=False, widget=forms.Textarea(attrs={"rows": 3}),
        help_text="One window a line: days, start-end, time zone (optional, UTC), serving floor — "
                  "e.g. “mon-fri 09:00-09:30 Europe/Berlin 4”.")
    schedule_lead_seconds = forms.IntegerField(label="Start windows early by (s; a cold start)", min_value=0,
                                               required=False,
                                               max_value=MAX_LEAD_SECONDS)

    def clean_schedule(self) -> list[dict]:
        """The lines as the service's windows (it checks them; a line it cannot split is refused here)."""
        windows = []
        for number, line in enumerate(self.cleaned_data["schedule"].splitlines(), start=1):
            if line.strip():
                windows.append(_window_of(line, number))
        return windows


def _window_of(line: str, number: int) -> dict:
    parts = line.split()
    times = parts[1].split("-") if len(parts) in (3, 4) else []
    if len(times) != 2 or not parts[-1].isdigit():
        raise forms.ValidationError(f"Line {number}: write “mon-fri 09:00-09:30 Europe/Berlin 4”.")
    return {"days": parts[0], "start": times[0], "end": times[1],
            "time_zone": parts[2] if len(parts) == 4 else "UTC", "min_serving": int(parts[-1])}


def schedule_lines(windows: list[dict]) -> str:
    """A stored schedule as the form's lines."""
    return "\n".join(f"{w['days']} {w['start']}-{w['end']} {w['time_zone']} {w['min_serving']}" for w in windows)
