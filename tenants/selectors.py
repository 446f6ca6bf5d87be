"""Reads about tenants that more than one surface needs."""
from django.db.models import QuerySet
from django.utils import timezone

from tenants.models import Invitation, InvitationStatus


def open_invitations_for(user) -> QuerySet:
    """Pending, unexpired invitations addressed to the user's own e-mail address."""
    from tenants.services import invitation_email

    email = invitation_email(getattr(user, "email", "") or "")
    if not email:
        return Invitation.objects.none()
    return (Invitation.objects.filter(email=email, status=InvitationStatus.PENDING, expires_at__gt=timezone.now())
            .select_related("tenant").order_by("-created_at", "-id"))
