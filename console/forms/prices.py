"""Setting a GPU (or CPU core) price from the console; the service checks duplicates and writes the audit event."""
from django import forms
from django.utils import timezone

from usage.models import PriceUnit

# The API's rule (usage/api/serializers.py), so both accept the same names.
GPU_TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
MINUTE = "%Y-%m-%dT%H:%M"


class GpuPriceForm(forms.Form):
    gpu_type = forms.RegexField(
        GPU_TYPE_PATTERN, label="GPU type", max_length=64,
        error_messages={"invalid": "Letters, digits, '.', '_' and '-', starting with a letter or digit."},
        help_text="As deployments name it, e.g. H100 (matched case-insensitively); “cpu” for CPU cores.")
    unit = forms.ChoiceField(choices=PriceUnit.choices, initial=PriceUnit.GPU)
    hourly_usd = forms.DecimalField(label="Price per hour (USD)", min_value=0, max_digits=10, decimal_places=4)
    effective_from = forms.DateTimeField(
        label="Effective from (UTC)", required=False, input_formats=[MINUTE, "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format=MINUTE),
        help_text="Empty means now. Hours before it keep the price they had.")
    note = forms.CharField(max_length=200, required=False, help_text="Where the price comes from, e.g. a contract.")

    @classmethod
    def blank(cls):
        return cls(initial={"effective_from": timezone.now().replace(second=0, microsecond=0)})
