"""Starting a rollout from the console: the REST API's fields, each with its default filled in."""
from django import forms
from django.core.exceptions import ValidationError

from models_registry.models import ModelVersion, VersionStatus
from rollouts.gates import Gates
from rollouts.models import DEFAULT_GRACE_SECONDS, RolloutStrategy, StickyBy

DEFAULT_GATES = Gates()
GATE_FIELDS = ("max_error_rate", "error_rate_ratio", "error_rate_margin", "ttft_p95_ratio", "ttft_p95_margin_ms",
               "min_requests", "window_seconds", "data_timeout_seconds")


def _gate(label: str, name: str, help_text: str = "") -> forms.Field:
    initial = getattr(DEFAULT_GATES, name)
    kind = forms.IntegerField if isinstance(initial, int) else forms.FloatField
    return kind(label=label, initial=initial, required=False, min_value=0, help_text=help_text)


class RolloutForm(forms.Form):
    to_version = forms.ModelChoiceField(queryset=ModelVersion.objects.none(), label="To version",
                                        help_text="A published version of the deployment's model.")
    strategy = forms.ChoiceField(choices=RolloutStrategy.choices, initial=RolloutStrategy.CANARY)
    stages = forms.CharField(
        required=False, label="Stages", max_length=300,
        help_text="weight:bake seconds, comma-separated, e.g. 0.1:900, 0.5:900, 1:300. Empty: the strategy's default "
                  "(canary 10 % → 50 % → 100 %; blue-green 100 % once warm).")
    sticky_by = forms.ChoiceField(choices=StickyBy.choices, initial=StickyBy.SESSION, label="Sticky by")
    grace_seconds = forms.IntegerField(label="Grace (seconds)", initial=DEFAULT_GRACE_SECONDS, min_value=0,
                                       help_text="How long the old version stays warm after a promotion.")
    max_error_rate = _gate("Max error rate", "max_error_rate", "The new version's ceiling (0–1).")
    error_rate_ratio = _gate("Error rate ratio", "error_rate_ratio", "× the old version's error rate …")
    error_rate_margin = _gate("Error rate margin", "error_rate_margin", "… plus this.")
    ttft_p95_ratio = _gate("p95 TTFT ratio", "ttft_p95_ratio", "× the old version's p95 TTFT …")
    ttft_p95_margin_ms = _gate("p95 TTFT margin (ms)", "ttft_p95_margin_ms", "… plus this.")
    min_requests = _gate("Minimum requests", "min_requests", "Nothing is judged before the new version has these.")
    window_seconds = _gate("Window (seconds)", "window_seconds")
    data_timeout_seconds = _gate("Data timeout (seconds)", "data_timeout_seconds",
                                 "Still too few requests this long after the bake: the rollout pauses.")

    def __init__(self, *args, deployment, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["to_version"].queryset = (
            ModelVersion.objects.select_related("model").filter(
                model_id=deployment.model_version.model_id, status=VersionStatus.PUBLISHED)
            .exclude(pk=deployment.model_version_id).order_by("-created_at"))

    def clean_stages(self) -> list[dict] | None:
        text = self.cleaned_data["stages"].strip()
        if not text:
            return None
        try:
            pairs = [part.split(":") for part in text.split(",")]
            return [{"weight": float(weight), "bake_seconds": int(bake)} for weight, bake in pairs]
        except ValueError:
            raise ValidationError("Write each stage as weight:bake seconds, e.g. 0.1:900.") from None

    def service_arguments(self) -> dict:
        """start_rollout's keyword arguments; blank gates take their defaults (the service checks ranges)."""
        data = self.cleaned_data
        gates = {name: data[name] for name in GATE_FIELDS if data.get(name) is not None}
        return {"to_version": data["to_version"], "strategy": data["strategy"], "stages": data["stages"],
                "gates": gates, "sticky_by": data["sticky_by"], "grace_seconds": data["grace_seconds"]}
