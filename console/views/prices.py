"""GPU prices: the price now and the history per GPU type, what each deployment holds, and setting a price.

Everyone on the operational pages reads (the REST API lets every caller read prices too); only
platform admins set one — prices are platform-wide, so no tenant role covers them (docs/roles.md).
"""
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q
from django.db.models.functions import Lower
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from audit.actor import Actor
from console import stats
from console.access import operations_or_404, require_platform_admin
from console.forms.prices import GpuPriceForm
from console.views.common import run_form_service
from console.views.overview import scoped_tenant_ids
from fleet.states import LIVE_STATES
from usage.cost.prices import CPU, held_resources
from usage.models import GpuPrice
from usage.services import set_gpu_price


@login_required
def price_list(request):
    principal = operations_or_404(request)
    return _page(request, principal, GpuPriceForm.blank() if principal.is_platform_admin else None)


@login_required
@require_POST
def price_create(request):
    principal = operations_or_404(request)
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
    deployments = (stats.visible_deployments(scoped_tenant_ids(principal)).select_related("tenant")
                   .annotate(live=Count("instances", filter=Q(instances__state__in=LIVE_STATES)))
                   .order_by("tenant__slug", "name"))
    rows = []
    for deployment in deployments:
        key, units = held_resources(deployment)
        price = current.get(key)
        rows.append({"deployment": deployment, "is_cpu": key == CPU, "units": units, "price": price,
                     "hourly": price.hourly_usd * units * deployment.live if price else None})
    return rows
