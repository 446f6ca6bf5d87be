"""Tenants: the list (platform admins: all, members: theirs), creation and suspension, and one tenant's page."""
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST, require_safe

from apikeys.models import ApiKey
from audit.actor import Actor
from console import stats
from console.access import (
    OPERATIONS,
    operations_or_404,
    principal_of,
    require,
    require_platform_admin,
    tenant_or_404,
    tenants_with,
)
from console.forms.tenants import GrantForm, MemberAddForm, QuotaForm, TenantCreateForm
from console.timerange import TimeRange
from console.views.common import form_errors, run_service
from console.views.quotas import policy_rows
from quotas.models import QuotaPolicy
from tenants import services
from tenants.access import has_perm
from tenants.models import InvitationStatus, TenantStatus
from tenants.roles import Perm, Role


@login_required
@require_safe
def tenant_list(request):
    principal = operations_or_404(request)
    tenants = tenants_with(principal, OPERATIONS)
    rows = [{"tenant": t, "members": t.memberships.count(), "status_action": _status_action(t)} for t in tenants]
    form = TenantCreateForm() if principal.is_platform_admin else None
    return render(request, "console/tenants/list.html", {"rows": rows, "form": form,
                                                         "is_platform_admin": principal.is_platform_admin})


def _status_action(tenant) -> tuple[str, str]:
    return ("activate", "Activate") if tenant.status == TenantStatus.SUSPENDED else ("suspend", "Suspend")


@login_required
@require_POST
def tenant_create(request):
    require_platform_admin(request)
    form = TenantCreateForm(request.POST)
    if not form.is_valid():
        form_errors(request, form)
        return redirect("console:tenants")
    tenant = run_service(request,
                         lambda: services.create_tenant(**form.cleaned_data, actor=Actor.from_request(request)),
                         f"Tenant {form.cleaned_data['slug']} created.")
    return redirect("console:tenant", slug=tenant.slug) if tenant else redirect("console:tenants")


@login_required
@require_POST
def tenant_status(request, slug, action):
    require_platform_admin(request)
    tenant = tenant_or_404(request, slug)
    status = TenantStatus.SUSPENDED if action == "suspend" else TenantStatus.ACTIVE
    run_service(request, lambda: services.set_tenant_status(tenant, status, actor=Actor.from_request(request)),
                f"{tenant.slug} is now {status.label.lower()}.")
    return redirect(request.POST.get("next") or "console:tenants")


@login_required
@require_safe
def tenant_detail(request, slug):
    tenant = tenant_or_404(request, slug)
    principal = principal_of(request)
    perms = {p: has_perm(principal, tenant, p) for p in Perm.values}
    return render(request, "console/tenants/detail.html", {
        "tenant": tenant, "can": perms, "role_choices": Role.choices,
        "members": tenant.memberships.select_related("user").order_by("user__username"),
        "invitations": tenant.invitations.filter(status=InvitationStatus.PENDING).order_by("email")
        if perms[Perm.VIEW_MEMBERS] or perms[Perm.MANAGE_MEMBERS] else None,
        "member_form": MemberAddForm() if perms[Perm.MANAGE_MEMBERS] else None,
        "grants": services.tenant_grants(tenant) if perms[Perm.VIEW_MEMBERS] or perms[Perm.MANAGE_MEMBERS] else None,
        "grant_form": GrantForm(tenant=tenant) if perms[Perm.MANAGE_MEMBERS] else None,
        "keys": _keys_for(request, tenant, perms), "quota": _quota(tenant, perms),
        "subject_quotas": policy_rows(request, tenant) if perms[Perm.VIEW_QUOTAS] else None,
        "usage": _usage_summary(tenant) if perms[Perm.VIEW_USAGE] else None,
        "is_platform_admin": principal.is_platform_admin,
        "invitation_days": settings.SWITCHYARD_INVITATION_DAYS,
        "status_action": _status_action(tenant)})


def _keys_for(request, tenant, perms):
    keys = ApiKey.objects.filter(tenant=tenant).select_related("user")
    if perms[Perm.VIEW_KEYS] or perms[Perm.MANAGE_KEYS]:
        return keys[:20]
    return keys.filter(user=request.user)[:20] if perms[Perm.MANAGE_OWN_KEYS] else None


def _quota(tenant, perms):
    if not perms[Perm.VIEW_QUOTAS]:
        return None
    policy = QuotaPolicy.objects.filter(tenant=tenant, api_key__isnull=True, user__isnull=True).first()
    form = QuotaForm.for_policy(policy) if policy and perms[Perm.MANAGE_QUOTAS] else None
    return {"policy": policy, "form": form}


def _usage_summary(tenant) -> dict:
    now = timezone.now()
    rows = []
    for label, length in (("Last 24 hours", timedelta(hours=24)), ("Last 30 days", timedelta(days=30))):
        tr = TimeRange(key="", label=label, start=now - length, end=now, unit="hour")
        events = stats.events_in([tenant.pk], tr)
        rows.append({"label": label, "requests": events.count(), "ttft_p95": stats.percentile(events, "ttft_ms", 0.95),
                     "error_rate": stats.error_rate(events)})
    return {"rows": rows}


@login_required
@require_POST
def quota_update(request, slug):
    tenant = tenant_or_404(request, slug)
    require(request, tenant, Perm.MANAGE_QUOTAS)
    policy = QuotaPolicy.objects.filter(tenant=tenant, api_key__isnull=True, user__isnull=True).first()
    form = QuotaForm(request.POST)
    if not form.is_valid():
        form_errors(request, form)
        return redirect("console:tenant", slug=slug)
    from quotas.services import create_quota_policy, update_quota_policy

    actor = Actor.from_request(request)
    if policy is None:  # a tenant without a tenant-wide policy gets one (audited as quota.create)
        save = lambda: create_quota_policy(tenant=tenant, **form.limits(), actor=actor)  # noqa: E731
    else:
        save = lambda: update_quota_policy(policy, **form.limits(), actor=actor)  # noqa: E731
    run_service(request, save, "Quota saved.")
    return redirect("console:tenant", slug=slug)


@login_required
@require_POST
def tenant_supersession(request, slug):
    """Turn cancelling superseded editor completions on or off (docs/supersession.md)."""
    tenant = tenant_or_404(request, slug)
    require(request, tenant, Perm.UPDATE_TENANT)
    enabled = request.POST.get("cancel_superseded") == "on"
    run_service(request, lambda: services.update_tenant(tenant, cancel_superseded=enabled,
                                                        actor=Actor.from_request(request)),
                f"Superseded completions are {'now' if enabled else 'no longer'} cancelled.")
    return redirect("console:tenant", slug=slug)
