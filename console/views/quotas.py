"""Quota policies narrowed to one API key or one member: listed on the tenant's page, added, edited, deleted.

The tenant comes from the URL through `console.access` and every policy is looked up inside it, so
another tenant's policy id is a 404 like another tenant's slug.
"""
from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from audit.actor import Actor
from console.access import QUOTAS, principal_of, require, tenant_or_404
from console.forms.quotas import SubjectQuotaForm
from console.forms.tenants import QuotaForm
from console.views.common import run_form_service, run_service
from quotas import services
from quotas.models import QuotaPolicy
from tenants.access import has_perm
from tenants.roles import Perm

KEY_LISTING = (Perm.VIEW_KEYS, Perm.MANAGE_KEYS)


def narrowed_policies(tenant):
    """The tenant's key- and user-level policies (the tenant-wide one has its own form)."""
    return (QuotaPolicy.objects.filter(tenant=tenant).filter(Q(api_key__isnull=False) | Q(user__isnull=False))
            .select_related("api_key__user", "user").order_by("api_key_id", "user__username", "pk"))


def _managed(request, slug):
    tenant = tenant_or_404(request, slug, QUOTAS)
    require(request, tenant, Perm.MANAGE_QUOTAS)
    return tenant


def _posted(request):
    return request.POST if request.method == "POST" else None


def _viewer(request, tenant) -> dict:
    principal = principal_of(request)
    return {"user": request.user, "sees_all_keys": any(has_perm(principal, tenant, p) for p in KEY_LISTING)}


def policy_rows(request, tenant) -> list[dict]:
    """The tenant page's table: each narrowed policy with who it applies to."""
    viewer = _viewer(request, tenant)
    return [{"policy": p, "subject": subject_label(p, **viewer)} for p in narrowed_policies(tenant)]


def subject_label(policy, *, user, sees_all_keys: bool) -> str:
    """Who a policy narrows to; another member's key is named by id only for those who may not list keys."""
    if policy.user_id:
        return f"Member {policy.user.get_username()}"
    key = policy.api_key
    if sees_all_keys or key.user_id == user.pk:
        return f"API key {key.prefix}… {key.name}"
    return f"API key #{key.pk}"


def _back(tenant):
    return redirect(reverse("console:tenant", args=[tenant.slug]) + "#subject-quotas-h")


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def policy_create(request, slug):
    tenant = _managed(request, slug)
    form = SubjectQuotaForm(_posted(request), tenant=tenant)
    if request.method == "POST" and form.is_valid() and run_form_service(
            request, form, lambda: services.create_quota_policy(
                tenant=tenant, **form.subject_kwargs(), **form.limits(), actor=Actor.from_request(request)),
            "Quota policy added."):
        return _back(tenant)
    return render(request, "console/quotas/edit.html", {"tenant": tenant, "form": form, "policy": None})


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def policy_edit(request, slug, policy_id):
    tenant = _managed(request, slug)
    policy = get_object_or_404(narrowed_policies(tenant), pk=policy_id)
    form = QuotaForm.for_policy(policy, data=_posted(request))
    if request.method == "POST" and form.is_valid() and run_form_service(
            request, form,
            lambda: services.update_quota_policy(policy, **form.limits(), actor=Actor.from_request(request)),
            "Quota policy saved."):
        return _back(tenant)
    return render(request, "console/quotas/edit.html", {"tenant": tenant, "form": form, "policy": policy,
                                                        "subject": subject_label(policy, **_viewer(request, tenant))})


@login_required
@require_POST
def policy_delete(request, slug, policy_id):
    tenant = _managed(request, slug)
    policy = get_object_or_404(narrowed_policies(tenant), pk=policy_id)
    run_service(request, lambda: services.delete_quota_policy(policy, actor=Actor.from_request(request)),
                "Quota policy deleted; the tenant-wide limits still apply.")
    return _back(tenant)
