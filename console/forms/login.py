"""Console sign-in with a failed-attempt limit."""
from django import forms
from django.contrib.auth.forms import AuthenticationForm

from console import login_throttle
from controlplane.request_context import client_ip


class ThrottledAuthenticationForm(AuthenticationForm):
    error_messages = {
        **AuthenticationForm.error_messages,
        "locked": "Too many failed sign-ins. Wait 15 minutes and try again.",
    }

    def clean(self):
        username = self.cleaned_data.get("username") or ""
        ip = client_ip(self.request.META) if self.request else None
        if login_throttle.is_locked(username, ip):
            raise forms.ValidationError(self.error_messages["locked"], code="locked")
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            login_throttle.record_failure(username, ip)
            raise
        login_throttle.clear(username, ip)
        return cleaned
