"""Fleet: deployments and their instances, with deploy, scale, autoscaling, drain, restart and delete (fleet
services)."""
from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST, require_safe

from audit.actor import Actor
from console.access import FLEET, can_manage_fleet, page_or_404, principal_of, tenants_with
from console.charts import scaling_chart
from console.forms.fleet import DeployForm, RoutingForm, ScaleForm, ScalingForm, schedule_lines
from console.views.common import form_errors, run_service
from console.views.object_grants import object_grants_context
from fleet import services
from fleet.models import Deployment, ScalingPolicy
from fleet.permissions import can_operate_deployment, may_see_internals, readable_deployments, reads_fleet_somewhere
from fleet.runtime.capacity import WAITING_FOR_CAPACITY
from fleet.states import LIVE_STATES, InstanceState
from rollouts.selectors import active_rollout

LOG_TAIL_LINES = 20


def _deployments(principal):
    """The fleet API's rule (fleet.permissions.readable_deployments): shared pools for platform admins only."""
    return (readable_deployments(principal).select_related("tenant", "model_version__model")
            .prefetch_related("instances").order_by("tenant__slug", "name"))


def fleet_page_or_404(request):
    """The principal, if any deployment is theirs to read (the fleet rule, or a per-object grant); else 404."""
    principal = principal_of(request)
    if not reads_fleet_somewhere(principal):
        raise Http404("Not found.")
    return principal


def _deployment_or_404(request, pk) -> Deployment:
    return get_object_or_404(_deployments(fleet_page_or_404(request)), pk=pk)


def _writable(request, pk) -> Deployment:
    """A deployment to operate: who manages its tenant's fleet, or holds `change_deployment` on it."""
    deployment = _deployment_or_404(request, pk)
    if not can_operate_deployment(principal_of(request), deployment):
        raise PermissionDenied("Managing deployments needs the owner or admin role in this tenant.")
    return deployment


def _deletable(request, pk) -> Deployment:
    """Deleting is the tenant's call: a per-object grant does not allow it."""
    deployment = _deployment_or_404(request, pk)
    if not can_manage_fleet(principal_of(request), deployment.tenant):
        raise PermissionDenied("Deleting deployments needs the owner or admin role in this tenant.")
    return deployment


def _deploy_form(principal, data=None):
    tenants = [t for t in tenants_with(principal, *FLEET) if can_manage_fleet(principal, t)]
    if not (tenants or principal.is_platform_admin):
        return None
    return DeployForm(data, tenants=tenants, shared=principal.is_platform_admin)


@login_required
@require_safe
def fleet_list(request):
    principal = fleet_page_or_404(request)
    rows = [{"deployment": d, "summary": _summary(d)} for d in _deployments(principal)]
    return render(request, "console/fleet/list.html", {"rows": rows, "form": _deploy_form(principal)})


def _summary(deployment) -> dict:
    instances = list(deployment.instances.all())
    ready = sum(1 for i in instances if i.state == InstanceState.READY)
    live = sum(1 for i in instances if i.state in LIVE_STATES)
    waiting = [i.pending_reason for i in instances if i.state == InstanceState.PENDING
               and i.pending_reason.startswith(WAITING_FOR_CAPACITY)]
    return {"ready": ready, "live": live, "target": deployment.target_replicas,
            "failed": sum(1 for i in instances if i.state == InstanceState.FAILED),
            "waiting_for_capacity": len(waiting), "capacity_reason": waiting[0] if waiting else ""}


@login_required
@require_POST
def deploy(request):
    principal = page_or_404(request, FLEET)
    form = _deploy_form(principal, request.POST)
    if form is None:
        raise PermissionDenied("Deploying needs the owner or admin role in a tenant.")
    if not form.is_valid():
        form_errors(request, form)
        return redirect("console:fleet")
    data = dict(form.cleaned_data)
    slug = data.pop("tenant")
    tenant = next((t for t in tenants_with(principal, *FLEET) if t.slug == slug), None) if slug else None
    if not can_manage_fleet(principal, tenant) or (tenant is None and not principal.is_platform_admin):
        raise PermissionDenied("You may not deploy there.")
    created = run_service(request,
                          lambda: services.create_deployment(tenant=tenant, actor=Actor.from_request(request), **data),
                          f"Deployment {data['name']} created; instances are starting.")
    return redirect("console:deployment", pk=created.pk) if created else redirect("console:fleet")


@login_required
@require_safe
def deployment_detail(request, pk):
    deployment = _deployment_or_404(request, pk)
    principal = principal_of(request)
    can_manage = can_operate_deployment(principal, deployment)
    internals = may_see_internals(principal, deployment.tenant)
    return render(request, "console/fleet/detail.html", {
        "deployment": deployment,
        "instances": [_instance_row(i, internals) for i in deployment.instances.order_by("-pk")],
        "summary": _summary(deployment), "can_manage": can_manage,
        "can_delete": can_manage_fleet(principal, deployment.tenant), **object_grants_context(request, deployment),
        "rollout": active_rollout(deployment.pk),
        "scale_form": (ScaleForm(initial={n: getattr(deployment, n) for n in ScaleForm.base_fields})
                       if can_manage else None),
        "routing_form": RoutingForm(initial={"routing_policy": deployment.routing_policy}) if can_manage else None,
        **_scaling_context(deployment, can_manage)})


def _scaling_context(deployment, can_manage: bool) -> dict:
    """The last hour of demand and size as a chart, the latest decisions, and the policy form."""
    since = timezone.now() - timedelta(hours=1)
    samples = list(deployment.demand_samples.filter(at__gte=since).order_by("at"))
    decisions = list(deployment.scaling_decisions.order_by("-decided_at")[:20])
    policy = getattr(deployment, "scaling", None) or ScalingPolicy(deployment=deployment, enabled=False)
    initial = {name: getattr(policy, name) for name in ScalingForm.base_fields}
    form = ScalingForm(initial={**initial, "schedule": schedule_lines(policy.schedule)}) if can_manage else None
    return {"scaling_policy": policy, "scaling_chart": scaling_chart(samples, decisions[::-1]),
            "scaling_decisions": decisions, "scaling_form": form}


def _instance_row(instance, internals: bool) -> dict:
    """One instance for the page; engine internals (log tail, failure details, endpoint) only with `internals`."""
    metrics = instance.metrics or {}
    kv = metrics.get("kv_cache_usage_perc")
    row = {"id": instance.pk, "name": instance.name, "state": instance.state,
           "state_label": instance.get_state_display(),
           "role": instance.role, "role_label": instance.get_role_display(),
           "pending_reason": instance.pending_reason if instance.state == InstanceState.PENDING else "",
           "health": _health(instance, internals), "queue": metrics.get("num_requests_waiting"),
           "running": metrics.get("num_requests_running"), "kv_cache": None if kv is None else round(kv * 100, 1),
           "restarts": instance.restart_count, "failure": None, "log_tail": "", "endpoint": None,
           "actionable": instance.state in (*LIVE_STATES, InstanceState.DRAINING)}
    if internals:
        row.update(failure=instance.failure_reason, endpoint=instance.endpoint_url,
                   log_tail="\n".join((instance.log_tail or "").splitlines()[-LOG_TAIL_LINES:]))
    return row


def _health(instance, internals: bool) -> str:
    if instance.last_health_ok is None:
        return "not checked yet"
    if instance.last_health_ok:
        return "healthy"
    detail = f" {instance.last_health_error}" if internals and instance.last_health_error else ""
    return f"failing ({instance.consecutive_health_failures}×{detail})"


@login_required
@require_safe
def instances_json(request, pk):
    """What the page's poller reads every few seconds: instance rows and the progress summary."""
    deployment = _deployment_or_404(request, pk)
    internals = may_see_internals(principal_of(request), deployment.tenant)
    rows = [{k: v for k, v in _instance_row(i, internals).items() if k != "log_tail"}
            for i in deployment.instances.order_by("-pk")]
    return JsonResponse({"status": deployment.status, "summary": _summary(deployment), "instances": rows})


@login_required
@require_POST
def scale(request, pk):
    deployment = _writable(request, pk)
    form = ScaleForm(request.POST)
    if not form.is_valid():
        form_errors(request, form)
    else:
        run_service(request, lambda: services.scale_deployment(deployment, **form.cleaned_data,
                                                               actor=Actor.from_request(request)), "Scaling requested.")
    return redirect("console:deployment", pk=pk)


@login_required
@require_POST
def routing(request, pk):
    deployment = _writable(request, pk)
    form = RoutingForm(request.POST)
    if not form.is_valid():
        form_errors(request, form)
    else:
        run_service(request, lambda: services.set_routing_policy(deployment, **form.cleaned_data,
                                                                 actor=Actor.from_request(request)),
                    "Routing saved: gateways apply it within a second.")
    return redirect("console:deployment", pk=pk)


@login_required
@require_POST
def delete(request, pk):
    deployment = _deletable(request, pk)
    run_service(request, lambda: services.delete_deployment(deployment, actor=Actor.from_request(request)),
                f"{deployment.name} is being drained and deleted.")
    return redirect("console:deployment", pk=pk)


@login_required
@require_POST
def instance_action(request, pk, instance_id, action):
    deployment = _writable(request, pk)
    instance = deployment.instances.filter(pk=instance_id).first()
    if instance is None:
        raise Http404("No such instance.")
    service = services.drain_instance if action == "drain" else services.restart_instance
    run_service(request, lambda: service(instance, actor=Actor.from_request(request)),
                f"{instance.name}: {action} requested.")
    return redirect("console:deployment", pk=pk)


@login_required
@require_POST
def scaling(request, pk):
    deployment = _writable(request, pk)
    form = ScalingForm(request.POST)
    if not form.is_valid():
        form_errors(request, form)
    else:
        run_service(request, lambda: services.set_scaling_policy(deployment, **form.cleaned_data,
                                                                 actor=Actor.from_request(request)),
                    "Autoscaling saved." if form.cleaned_data["enabled"] else "Autoscaling off: serving at minimum.")
    return redirect("console:deployment", pk=pk)
