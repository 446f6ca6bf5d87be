"""The one-time invitation link: /console/join/<token>/ (public: the token is the credential).

A dead link (unknown, expired, already used, revoked) is refused with a page that says which. An
open one is accepted by the signed-in account holding the invited address (signed in with a password
or through an identity provider), or — when no account has it and local sign-in is on — by creating
one here with a password.
"""
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from audit.actor import Actor
from console.forms.join import JoinForm
from console.views.common import error_text, run_service
from sso.providers import providers
from tenants import services
from tenants.models import InvitationStatus
from tenants.services import invitation_email

GONE = 410
DEAD_LINKS = {
    InvitationStatus.ACCEPTED: "This invitation link was already used: it works only once.",
    InvitationStatus.DECLINED: "This invitation was declined; the link no longer works.",
    InvitationStatus.REVOKED: "This invitation was withdrawn by the tenant's admins.",
}


@never_cache
@require_http_methods(["GET", "HEAD", "POST"])
def join(request, token):
    invitation = services.invitation_for_token(token)
    refusal = _refusal(invitation)
    if refusal:
        return render(request, "console/join_refused.html", {"reason": refusal[1]}, status=refusal[0])
    if request.user.is_authenticated:
        return _signed_in(request, invitation)
    has_account = get_user_model().objects.filter(email__iexact=invitation.email).exists()
    if has_account or not settings.SWITCHYARD_LOCAL_SIGNIN:
        return render(request, "console/join.html", {"invitation": invitation, "sign_in": True,
                                                      "sso_providers": providers().values()})
    return _create_account(request, invitation)


def _refusal(invitation) -> tuple[int, str] | None:
    if invitation is None:
        return 404, "This invitation link is not valid. Check that it was copied whole, or ask for a new invitation."
    if invitation.status in DEAD_LINKS:
        return GONE, DEAD_LINKS[invitation.status]
    if invitation.expires_at <= timezone.now():
        return GONE, "This invitation link has expired. Ask the tenant's admins to invite you again."
    return None


def _signed_in(request, invitation):
    mismatch = invitation_email(request.user.email) != invitation.email
    if request.method == "POST" and not mismatch:
        done = run_service(request, lambda: services.accept_invitation(
            invitation, user=request.user, actor=Actor.from_request(request)),
            f"You are now {invitation.role} in {invitation.tenant.slug}.")
        if done is not None:
            return redirect("console:home")
    return render(request, "console/join.html", {"invitation": invitation, "mismatch": mismatch},
                  status=403 if mismatch and request.method == "POST" else 200)


def _create_account(request, invitation):
    form = JoinForm(request.POST if request.method == "POST" else None,
                    initial={"username": invitation.username or invitation.email, "email": invitation.email})
    if request.method == "POST" and form.is_valid():
        try:
            membership = services.join_with_password(invitation, username=form.cleaned_data["username"],
                                                     password=form.cleaned_data["password1"])
        except services.ValidationError as exc:
            messages.error(request, error_text(exc))
        else:
            login(request, membership.user, backend="django.contrib.auth.backends.ModelBackend")
            messages.success(request, f"Welcome: you are now {membership.role} in {invitation.tenant.slug}.")
            return redirect("console:home")
    status = 400 if request.method == "POST" else 200
    return render(request, "console/join.html", {"invitation": invitation, "form": form,
                                                 "sso_providers": providers().values()}, status=status)
