"""Registering models and versions (platform admins)."""
from django import forms

from models_registry.models import ModelFamily, Quantization
from models_registry.services import DTYPES


class ModelForm(forms.Form):
    name = forms.CharField(max_length=200, help_text="What clients send as `model`.")
    family = forms.ChoiceField(choices=ModelFamily.choices, initial=ModelFamily.OTHER)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))


class VersionForm(forms.Form):
    version = forms.CharField(max_length=64)
    artifact_uri = forms.CharField(label="Artifact URI", max_length=1000,
                                   help_text="A path under the model root, hf://org/repo@revision, s3://bucket/path or https://…")
    checksum = forms.CharField(required=False, max_length=200)
    quantization = forms.ChoiceField(choices=Quantization.choices, initial=Quantization.NONE)
    dtype = forms.ChoiceField(choices=[(d, d) for d in DTYPES], initial="auto")
    fim_template = forms.CharField(
        label="FIM template", required=False, max_length=500, strip=False,
        help_text="Blank: the family's fill-in-the-middle format. Else {prefix} and {suffix} once each between "
                  "the model's sentinels, e.g. <fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>.")
