"""Adding, re-roling and removing a tenant's members (MANAGE_MEMBERS, never above one's own role)."""
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from audit.actor import Actor
from console.access import require, require_rank, tenant_or_404
from console.forms.tenants import MemberAddForm, MemberRoleForm
from console.views.common import form_errors, run_service
from tenants import services
from tenants.models import Membership
from tenants.roles import Perm


def _managed(request, slug):
    tenant = tenant_or_404(request, slug)
    require(request, tenant, Perm.MANAGE_MEMBERS)
    return tenant


@login_required
@require_POST
def member_add(request, slug):
    tenant = _managed(request, slug)
    form = MemberAddForm(request.POST)
    if not form.is_valid():
        form_errors(request, form)
        return redirect("console:tenant", slug=slug)
    require_rank(request, tenant, form.cleaned_data["role"])
    data = {**form.cleaned_data, "username": form.cleaned_data["username"] or None}
    run_service(request, lambda: services.add_member(tenant=tenant, **data, actor=Actor.from_request(request)),
                f"{data['email']} added as {data['role']}.")
    return redirect("console:tenant", slug=slug)


@login_required
@require_POST
def member_role(request, slug, member_id):
    tenant = _managed(request, slug)
    membership = get_object_or_404(Membership.objects.select_related("user"), tenant=tenant, pk=member_id)
    form = MemberRoleForm(request.POST)
    if not form.is_valid():
        form_errors(request, form)
        return redirect("console:tenant", slug=slug)
    require_rank(request, tenant, membership.role)
    require_rank(request, tenant, form.cleaned_data["role"])
    role = form.cleaned_data["role"]
    run_service(request, lambda: services.change_member_role(membership, role, actor=Actor.from_request(request)),
                f"{membership.user.get_username()} is now {role}.")
    return redirect("console:tenant", slug=slug)


@login_required
@require_POST
def member_remove(request, slug, member_id):
    tenant = _managed(request, slug)
    membership = get_object_or_404(Membership.objects.select_related("user"), tenant=tenant, pk=member_id)
    require_rank(request, tenant, membership.role)
    run_service(request, lambda: services.remove_member(membership, actor=Actor.from_request(request)),
                f"{membership.user.get_username()} removed; their keys in {slug} are revoked.")
    return redirect("console:tenant", slug=slug)
