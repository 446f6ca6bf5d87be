"""Sign-in (throttled and audited; see console/forms/login.py and audit/auth_events.py)."""
from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.shortcuts import redirect
from django.urls import reverse

from console.forms import ThrottledAuthenticationForm
from console.forms.login import ThrottledPasswordChangeForm, is_locked_out
from sso.logout import sso_logout_url
from sso.providers import providers

TOO_MANY_REQUESTS = 429


class LoginView(auth_views.LoginView):
    template_name = "console/login.html"
    authentication_form = ThrottledAuthenticationForm
    redirect_authenticated_user = True
    http_method_names = ["get", "head", "post"]  # FormView would take a PUT as a POST

    def post(self, request, *args, **kwargs):
        if not settings.SWITCHYARD_LOCAL_SIGNIN:  # SSO only: no password is ever checked
            return self.render_to_response(self.get_context_data(form=self.get_form()), status=403)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if is_locked_out(form):  # the same answer for a locked username and a locked address
            response.status_code = TOO_MANY_REQUESTS
            response["Retry-After"] = str(settings.SWITCHYARD_LOGIN_LOCK_SECONDS)
        return response

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), "local_signin": settings.SWITCHYARD_LOCAL_SIGNIN,
                "sso_providers": sorted(providers().values(), key=lambda p: p.label),
                "sso_failed": self.request.GET.get("sso") == "failed"}


class LogoutView(auth_views.LogoutView):
    """Signs out of the console and, after an SSO sign-in, of the provider too (RP-initiated logout)."""

    def post(self, request, *args, **kwargs):
        provider_logout = sso_logout_url(request)
        response = super().post(request, *args, **kwargs)
        return redirect(provider_logout) if provider_logout else response



class AdminPasswordChangeView(auth_views.PasswordChangeView):
    """The admin's own password change, with the sign-in page's limits on the old password."""

    form_class = ThrottledPasswordChangeForm

    def get_form_kwargs(self):
        return {**super().get_form_kwargs(), "request": self.request}

    def get_success_url(self):
        return reverse("admin:password_change_done")

    def get_context_data(self, **kwargs):
        return {**admin.site.each_context(self.request), **super().get_context_data(**kwargs)}


admin_password_change = admin.site.admin_view(AdminPasswordChangeView.as_view(
    template_name="registration/password_change_form.html"))
