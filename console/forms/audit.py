"""Audit trail filters (dates are whole UTC days), and the manifest a verification starts from."""
import json
from datetime import datetime, time, timedelta, timezone

from django import forms


class AuditFilterForm(forms.Form):
    since = forms.DateField(required=False, label="From (UTC day)", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label="To (UTC day, inclusive)",
                            widget=forms.DateInput(attrs={"type": "date"}))
    tenant = forms.CharField(required=False, max_length=64, label="Tenant slug")
    actor = forms.CharField(required=False, max_length=200)
    action = forms.CharField(required=False, max_length=64, help_text="Exact, or a prefix ending in a dot: “api_key.”")

    def filters(self) -> dict:
        """The audit selectors' filter parameters (ISO date-times, until exclusive)."""
        data = self.cleaned_data if self.is_valid() else {}
        found = {name: data[name] for name in ("tenant", "actor", "action") if data.get(name)}
        if data.get("since"):
            found["since"] = datetime.combine(data["since"], time(), timezone.utc).isoformat()
        if data.get("until"):
            found["until"] = datetime.combine(data["until"] + timedelta(days=1), time(), timezone.utc).isoformat()
        return found


class SinceManifestForm(forms.Form):
    """An export manifest held outside the database: the chain must not be behind it."""

    MAX_BYTES = 64 * 1024  # a manifest is well under 2 KB

    manifest = forms.FileField(label="Signed manifest (.manifest.json)",
                               help_text="One you downloaded earlier: proves the trail was not rolled back since.")

    def clean_manifest(self) -> dict:
        upload = self.cleaned_data["manifest"]
        if upload.size > self.MAX_BYTES:
            raise forms.ValidationError("That file is too large to be a manifest.")
        try:
            manifest = json.loads(upload.read().decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise forms.ValidationError("That file is not a JSON manifest.") from None
        if not isinstance(manifest, dict):
            raise forms.ValidationError("That file is not a JSON manifest.")
        return manifest
