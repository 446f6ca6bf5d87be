"""Per-object grants on a deployment's console page: list, grant, revoke (tenants.object_grants).

The same rules as the REST API (tenants/api/object_grants.py): the deployment is looked up under the
fleet's read rule (404 otherwise); the list is shown to who may list the tenant's members; granting and
revoking need `manage_members`, the tenant permission the grant stands for, and a rank at or above the
member's.
"""
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from audit.actor import Actor
from console.access import principal_of, require_may_grant
from console.forms.tenants import ObjectGrantForm
from console.views.common import form_errors, run_service
from fleet.permissions import readable_deployments
from tenants import services
from tenants.access import has_perm, member_role
from tenants.models import Membership
from tenants.object_grants import DEPLOYMENT, grants_on
from tenants.roles import READ_RULES, Perm, Resource


def object_grants_context(request, deployment) -> dict:
    """The page's grants table (None: not the caller's to see) and form (None: not theirs to use)."""
    principal, tenant = principal_of(request), deployment.tenant
    if tenant is None or not any(has_perm(principal, tenant, p) for p in READ_RULES[Resource.MEMBERS]):
        return {"object_grants": None, "object_grant_form": None}
    manages = has_perm(principal, tenant, Perm.MANAGE_MEMBERS)
    return {"object_grants": list(grants_on(deployment)),
            "object_grant_form": ObjectGrantForm(tenant=tenant, permissions=DEPLOYMENT.perms) if manages else None}


def _managed_deployment(request, pk):
    """The deployment, if readable (404 otherwise), of a tenant whose members the caller manages (403 otherwise)."""
    deployment = (readable_deployments(principal_of(request)).select_related("tenant").filter(pk=pk).first())
    if deployment is None:
        raise Http404("No such deployment.")
    if deployment.tenant is None or not has_perm(principal_of(request), deployment.tenant, Perm.MANAGE_MEMBERS):
        raise PermissionDenied("Granting needs the owner or admin role in this tenant.")
    return deployment


@login_required
@require_POST
def object_grant_create(request, pk):
    deployment = _managed_deployment(request, pk)
    form = ObjectGrantForm(request.POST, tenant=deployment.tenant, permissions=DEPLOYMENT.perms)
    if not form.is_valid():
        form_errors(request, form)
        return redirect("console:deployment", pk=pk)
    membership = get_object_or_404(Membership.objects.select_related("user"), tenant=deployment.tenant,
                                   user_id=form.cleaned_data["member"])
    perm = form.cleaned_data["permission"]
    require_may_grant(request, deployment.tenant, DEPLOYMENT.stands_for(perm), membership.role)
    run_service(request, lambda: services.grant_object_permission(obj=deployment, user=membership.user, perm=perm,
                                                                  actor=Actor.from_request(request)),
                f"{membership.user.get_username()} now holds {perm} on {deployment.name}.")
    return redirect("console:deployment", pk=pk)


@login_required
@require_POST
def object_grant_revoke(request, pk, grant_id):
    deployment = _managed_deployment(request, pk)
    grant = get_object_or_404(grants_on(deployment), pk=grant_id)
    require_may_grant(request, deployment.tenant, DEPLOYMENT.stands_for(grant.permission.codename),
                      member_role(grant.user, deployment.tenant))
    run_service(request, lambda: services.revoke_object_permission(grant, actor=Actor.from_request(request)),
                f"{grant.permission.codename} of {grant.user.get_username()} on {deployment.name} revoked.")
    return redirect("console:deployment", pk=pk)
