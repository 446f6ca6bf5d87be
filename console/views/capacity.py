"""Capacity planning: a plan for a model version, a GPU type and N developers, with charts; the GPU type table;
advice for the deployments the user may see, from their live figures.

Whoever may read the registry opens the page (a plan reads a version's config); a plan from usage
history reads only tenants where the user may read usage; advice covers the deployments the fleet
rule lets them see. Only platform admins edit GPU types (platform-wide, like GPU prices).
"""
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST, require_safe

from audit.actor import Actor
from capacity import selectors, services
from capacity.api.serializers import PlanRequestSerializer
from capacity.models import GpuType
from console.access import REGISTRY, USAGE, page_or_404, require_platform_admin
from console.charts import bar_chart
from console.forms.capacity import PLAN_FIELDS, GpuTypeForm, PlanForm
from console.views.common import run_form_service, run_service
from fleet.models import DeploymentStatus
from fleet.permissions import readable_deployments
from tenants.access import tenant_ids_with, tenants_with

GIB = 1024 ** 3
ADVISED_DEPLOYMENTS = 20


@login_required
@require_safe
def capacity_page(request):
    principal = page_or_404(request, REGISTRY)
    usage_tenants = tenants_with(principal, *USAGE)
    if request.GET.get("tenant") and request.GET["tenant"] not in {t.slug for t in usage_tenants}:
        raise Http404("No such tenant.")  # another tenant's usage is a 404, as everywhere in the console
    asked = any(name in request.GET for name in PLAN_FIELDS)
    form = PlanForm(request.GET if asked else None, tenants=usage_tenants)
    document = _plan(principal, form, usage_tenants) if asked and form.is_valid() else None
    return _render(request, principal, form, document, GpuTypeForm() if principal.is_platform_admin else None)


def _plan(principal, form: PlanForm, usage_tenants) -> dict | None:
    data = form.request_data()
    if data["traffic"] == "usage":
        data.pop("developers", None)  # counted from who sent the requests
    payload = PlanRequestSerializer(data=data)
    if not payload.is_valid():
        for field, errors in payload.errors.items():
            form.add_error(field if field in form.fields else None, errors)
        return None
    validated = dict(payload.validated_data)
    try:
        if "gpu_type" in validated:
            validated["gpu_type"] = selectors.gpu_type_named(validated["gpu_type"])
        return selectors.make_plan(validated, scope=_scope(principal, data.get("tenant"), usage_tenants))
    except ValidationError as exc:
        for field, errors in exc.message_dict.items():
            form.add_error(field if field in form.fields else None, errors)
        return None


def _scope(principal, slug: str | None, usage_tenants) -> selectors.TrafficScope:
    if slug:
        tenant = next((t for t in usage_tenants if t.slug == slug), None)
        if tenant is None:
            raise Http404("No such tenant.")
        return selectors.TrafficScope(label=f"tenant {tenant.slug}", tenant_ids=[tenant.pk])
    ids = tenant_ids_with(principal, *USAGE)
    return selectors.TrafficScope(label="the whole install" if ids is None else "your tenants", tenant_ids=ids)


def charts(document: dict) -> dict:
    """Where one GPU's memory goes, and peak demand against what the replicas hold."""
    plan = document["plan"]
    memory = plan["memory"]
    if memory is not None:
        parts = [("Weights", memory["weights"]), ("Activation reserve", memory["reserve"]),
                 ("KV cache", memory["kv_cache"]), ("Held back (1 − utilization)", memory["total"] - memory["usable"])]
        memory_chart = bar_chart([(label, round(value / GIB, 2)) for label, value in parts],
                                 title="Memory of one GPU (GiB)", value_label="GiB")
    else:
        memory_chart = bar_chart([("KV space", round(plan["kv_space_bytes"] / GIB, 2))],
                                 title="KV space of the CPU engine (GiB)", value_label="GiB")
    per_replica = plan["concurrency_per_replica"]
    demand_chart = bar_chart([("In flight at peak", document["traffic"]["peak_concurrency"]),
                              ("One replica holds", per_replica),
                              ("Replicas for peak hold", per_replica * plan["replicas_for_peak"]),
                              ("All replicas hold", per_replica * plan["replicas"])],
                             title="Requests in flight: demand and capacity", value_label="requests")
    return {"memory_chart": memory_chart, "demand_chart": demand_chart}


def advice_rows(principal) -> list[dict]:
    deployments = (readable_deployments(principal).filter(status=DeploymentStatus.ACTIVE)
                   .select_related("tenant", "model_version__model").order_by("tenant__slug", "name"))
    return [{**selectors.deployment_advice(d), "deployment": d} for d in deployments[:ADVISED_DEPLOYMENTS]]


def _render(request, principal, form, document, gpu_form):
    return render(request, "console/capacity.html", {
        "form": form, "document": document, **(charts(document) if document else {}),
        "gpu_types": GpuType.objects.all(), "gpu_form": gpu_form, "advice": advice_rows(principal)})


@login_required
@require_POST
def gpu_type_create(request):
    principal = page_or_404(request, REGISTRY)
    require_platform_admin(request)
    form = GpuTypeForm(request.POST)
    if form.is_valid() and run_form_service(
            request, form, lambda: services.create_gpu_type(**form.cleaned_data, actor=Actor.from_request(request)),
            f"GPU type {form.cleaned_data.get('name')} added."):
        return redirect("console:capacity")
    return _render(request, principal, PlanForm(tenants=tenants_with(principal, *USAGE)), None, form)


@login_required
@require_POST
def gpu_type_delete(request, gpu_type_id: int):
    page_or_404(request, REGISTRY)
    require_platform_admin(request)
    gpu_type = get_object_or_404(GpuType, pk=gpu_type_id)
    run_service(request, lambda: services.delete_gpu_type(gpu_type, actor=Actor.from_request(request)),
                f"GPU type {gpu_type.name} removed.")
    return redirect("console:capacity")
