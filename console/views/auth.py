"""Sign-in (throttled and audited; see console/forms/login.py and audit/auth_events.py)."""
from django.contrib.auth import views as auth_views

from console.forms import ThrottledAuthenticationForm


class LoginView(auth_views.LoginView):
    template_name = "console/login.html"
    authentication_form = ThrottledAuthenticationForm
    redirect_authenticated_user = True
