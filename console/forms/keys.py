"""Minting an API key from the console."""
from datetime import timedelta

from django import forms
from django.utils import timezone

from apikeys.scopes import Scope
from tenants.roles import Role


class KeyCreateForm(forms.Form):
    tenant = forms.ChoiceField()
    name = forms.CharField(max_length=100, help_text="What the key is for, e.g. “VS Code on laptop”.")
    scopes = forms.MultipleChoiceField(choices=Scope.choices, initial=[Scope.INFERENCE],
                                       widget=forms.CheckboxSelectMultiple)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.DEVELOPER,
                             help_text="A key never acts above its owner's current role.")
    expires_in_days = forms.IntegerField(label="Expires in (days)", required=False, min_value=1, max_value=3650,
                                         help_text="Empty: never expires.")

    def __init__(self, *args, tenants=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tenant"].choices = [(t.slug, f"{t.name} ({t.slug})") for t in tenants]

    def expires_at(self):
        days = self.cleaned_data.get("expires_in_days")
        return timezone.now() + timedelta(days=days) if days else None


class PlatformKeyCreateForm(forms.Form):
    """A platform key: scope `admin`, no tenant, acting as the platform admin who mints it."""

    prefix = "platform"
    # Labels of their own: the tenant key form is on the same page.
    name = forms.CharField(label="Used by", max_length=100,
                           help_text="The automation that holds it, e.g. “terraform”; the key's name.")
    expires_in_days = forms.IntegerField(label="Platform key lifetime (days)", required=False, min_value=1,
                                         max_value=3650, help_text="Empty: never expires.")

    def expires_at(self):
        days = self.cleaned_data.get("expires_in_days")
        return timezone.now() + timedelta(days=days) if days else None
