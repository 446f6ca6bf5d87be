"""Inviting, re-roling and removing a tenant's members (MANAGE_MEMBERS, never above one's own role), and the
invitee's side: their own open invitations, accepted or declined."""
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST, require_safe

from audit.actor import Actor
from console.access import require, require_may_grant, require_rank, tenant_or_404
from console.forms.tenants import GrantForm, MemberAddForm, MemberRoleForm
from console.views.common import form_errors, run_service
from tenants import access, services
from tenants.models import Invitation, InvitationStatus, Membership
from tenants.roles import Perm
from tenants.selectors import open_invitations_for


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
    data = form.cleaned_data
    # The same words whether or not an account has the address: nothing is looked up (docs/roles.md).
    run_service(request, lambda: services.invite_member(tenant=tenant, **data, actor=Actor.from_request(request)),
                f"{data['email']} is invited as {data['role']}: an e-mail with a one-time link is on its way; "
                "they join when they accept it.")
    return redirect("console:tenant", slug=slug)


@login_required
@require_POST
def invitation_revoke(request, slug, invitation_id):
    tenant = _managed(request, slug)
    invitation = get_object_or_404(Invitation, tenant=tenant, pk=invitation_id, status=InvitationStatus.PENDING)
    require_rank(request, tenant, invitation.role)
    run_service(request, lambda: services.revoke_invitation(invitation, actor=Actor.from_request(request)),
                f"The invitation of {invitation.email} is revoked.")
    return redirect("console:tenant", slug=slug)


@login_required
@require_safe
def my_invitations(request):
    """Invitations to the signed-in user's own address (another address's invitation is never listed)."""
    return render(request, "console/invitations.html", {"invitations": open_invitations_for(request.user)})


@login_required
@require_POST
def invitation_answer(request, invitation_id, answer):
    invitation = get_object_or_404(open_invitations_for(request.user), pk=invitation_id)
    actor = Actor.from_request(request)
    if answer == "accept":
        run_service(request, lambda: services.accept_invitation(invitation, user=request.user, actor=actor),
                    f"You are now {invitation.role} in {invitation.tenant.slug}.")
    else:
        run_service(request, lambda: services.decline_invitation(invitation, user=request.user, actor=actor),
                    f"Invitation to {invitation.tenant.slug} declined.")
    return redirect("console:invitations")


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


@login_required
@require_POST
def grant_create(request, slug):
    """Grant one member one permission they lack — one the granter holds, to a member they outrank or equal."""
    tenant = _managed(request, slug)
    form = GrantForm(request.POST, tenant=tenant)
    if not form.is_valid():
        form_errors(request, form)
        return redirect("console:tenant", slug=slug)
    membership = get_object_or_404(Membership.objects.select_related("user"), tenant=tenant,
                                   user_id=form.cleaned_data["member"])
    require_may_grant(request, tenant, form.cleaned_data["permission"], membership.role)
    run_service(request, lambda: services.grant_permission(tenant=tenant, user=membership.user,
                                                           perm=form.cleaned_data["permission"],
                                                           actor=Actor.from_request(request)),
                f"{membership.user.get_username()} now holds {form.cleaned_data['permission']} in {slug}.")
    return redirect("console:tenant", slug=slug)


@login_required
@require_POST
def grant_revoke(request, slug, grant_id):
    tenant = _managed(request, slug)
    grant = get_object_or_404(services.tenant_grants(tenant), pk=grant_id)
    require_may_grant(request, tenant, grant.permission.codename, access.member_role(grant.user, tenant))
    run_service(request, lambda: services.revoke_permission(grant, actor=Actor.from_request(request)),
                f"Grant of {grant.permission.codename} to {grant.user.get_username()} revoked.")
    return redirect("console:tenant", slug=slug)
