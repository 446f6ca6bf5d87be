"""Console pages. The full console (usage, fleet, audit pages) grows with later issues."""
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from console.forms import ThrottledAuthenticationForm
from tenants.access import Principal, tenant_permissions, visible_tenants


class LoginView(auth_views.LoginView):
    template_name = "console/login.html"
    authentication_form = ThrottledAuthenticationForm
    redirect_authenticated_user = True


@login_required
def home(request):
    principal = Principal(user=request.user)
    tenants = [
        {"tenant": tenant, "perms": sorted(tenant_permissions(principal, tenant))}
        for tenant in visible_tenants(principal).order_by("slug")
    ]
    return render(request, "console/home.html", {"tenants": tenants, "is_platform_admin": principal.is_platform_admin})
