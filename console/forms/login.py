"""Console sign-in with failed-attempt limits per username and per address (console/login_throttle.py)."""
from django import forms
from django.contrib.auth.forms import AuthenticationForm, PasswordChangeForm

from console import login_throttle
from controlplane.request_context import client_ip

LOCKED_CODE = "locked"


def locked_error() -> forms.ValidationError:
    """The same words for a locked username and a locked address, whether or not the username exists."""
    return forms.ValidationError(f"Too many failed sign-ins. Try again in {login_throttle.lock_minutes()} minutes.",
                                 code=LOCKED_CODE)


def is_locked_out(form) -> bool:
    return any(error.code == LOCKED_CODE for errors in form.errors.as_data().values() for error in errors)


def checked_password(username: str, request, check, on_failure=lambda: None):
    """Run `check` (it raises ValidationError on a wrong password) unless the username or address is
    locked; a failure counts against both. Clearing the username's count on success is the caller's."""
    ip = client_ip(request.META) if request else None
    if login_throttle.is_locked(username, ip):
        raise locked_error()
    try:
        return check()
    except forms.ValidationError:
        on_failure()
        login_throttle.record_failure(username, ip)
        raise


class ThrottledAuthenticationForm(AuthenticationForm):
    def clean(self):
        username = self.cleaned_data.get("username") or ""
        cleaned = checked_password(username, self.request, super().clean)
        if self.get_user() is not None:
            login_throttle.record_success(username)
        return cleaned


class ThrottledPasswordChangeForm(PasswordChangeForm):
    """The admin's password change checks the old password: the same limits and audit, or a stolen
    session could guess the password there without ever meeting the sign-in page's."""

    required_css_class = "required"  # as the admin's own AdminPasswordChangeForm

    def __init__(self, user, *args, request=None, **kwargs):
        super().__init__(user, *args, **kwargs)
        self.request = request

    def clean_old_password(self):
        username = self.user.get_username()
        value = checked_password(username, self.request, super().clean_old_password,
                                 on_failure=lambda: _audit_wrong_password(username))
        login_throttle.record_success(username)
        return value


def _audit_wrong_password(username: str) -> None:
    from audit.actor import Actor
    from audit.services import record_event

    record_event(actor=Actor.anonymous(username), action="auth.login_failed",
                 after={"username": username, "via": "password change"})
