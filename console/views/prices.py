"""GPU prices: the price now and the history per GPU type, what each deployment holds, and setting a price.

Whoever may read usage somewhere reads them (the REST API's rule); the deployments listed are those the
fleet rule lets them see. Only platform admins set a price: prices are platform-wide (docs/roles.md).
"""
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q
from django.db.models.functions import Lower
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST, require_safe

from audit.actor import Actor
from console.access import USAGE, page_or_404, require_platform_admin
from console.forms.prices import GpuPriceForm
from console.views.common import run_form_service
from fleet.permissions import readable_deployments
from fleet.states import LIVE_STATES
from usage.cost.prices import CPU, held_resources
from usage.models import GpuPrice
from usage.services import set_gpu_price


@login_required
@require_safe
def price_list(request):
    principal = page_or_404(request, USAGE)
    return _page(request, principal, GpuPriceForm.blank() if principal.is_platform_admin else None)


@login_required
@require_POST
def price_create(request):
    principal = page_or_404(request, USAGE)
    require_platform_admin(request)
    form = GpuPriceForm(request.POST)
    if form.is_valid() and run_form_service(
            request, form, lambda: set_gpu_price(**form.cleaned_data, actor=Actor.from_request(request)),
            f"Price of {form.cleaned_data.get('gpu_type')} saved."):
        return redirect("console:prices")
    return _page(request, principal, form)


def _page(request, principal, form):
    history, current = price_history(timezone.now())
    return render(request, "console/prices/list.html", {
        "current": sorted(current.values(), key=lambda p: p.gpu_type.lower()), "history": history,
        "deployments": deployment_rows(principal, current), "form": form})


def price_history(now) -> tuple[list[dict], dict[str, GpuPrice]]:
    """Every price, newest first per type, marked scheduled / current / superseded; and the current ones by type."""
    current, rows = {}, []
    for price in GpuPrice.objects.order_by(Lower("gpu_type"), "-effective_from"):
        key = price.gpu_type.lower()
        if price.effective_from > now:
            status = "scheduled"
        elif key not in current:
            current[key], status = price, "current"
        else:
            status = "superseded"
        rows.append({"price": price, "status": status})
    return rows, current


def deployment_rows(principal, current: dict) -> list[dict]:
    """What one instance of each visible deployment holds, and what its live instances cost per hour now."""
    deployments = (readable_deployments(principal).select_related("tenant")
                   .annotate(live=Count("instances", filter=Q(instances__state__in=LIVE_STATES)))
                   .order_by("tenant__slug", "name"))
    rows = []
    for deployment in deployments:
        key, units = held_resources(deployment)
        price = current.get(key)
        rows.append({"deployment": deployment, "is_cpu": key == CPU, "units": units, "price": price,
                     "hourly": price.hourly_usd * units * deployment.live if price else None})
    return rows
