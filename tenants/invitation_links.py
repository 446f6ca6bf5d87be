"""One-time invitation links: a random token e-mailed to the invitee, only its SHA-256 stored.

The token carries 256 random bits, so a plain hash suffices (nothing to guess). The link is good while
its invitation is pending and unexpired; accepting, declining, revoking or renewing the invitation
ends it. It is sent through Django's mail backend after the invitation's transaction commits.
"""
import hashlib
import secrets

from django.conf import settings
from django.core.mail import send_mail
from django.urls import reverse


def new_token() -> str:
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def link_for(token: str) -> str:
    return settings.SWITCHYARD_CONSOLE_URL + reverse("console:join", args=[token])


def send_invitation_mail(*, email: str, tenant_name: str, role: str, expires_at, token: str) -> None:
    """The invitation e-mail: who invites, to what, until when, and the link (never logged elsewhere)."""
    body = (f"You are invited to join {tenant_name} on Switchyard as {role}.\n\n"
            f"Open this link to accept (it works once, until {expires_at:%Y-%m-%d %H:%M} UTC):\n\n"
            f"{link_for(token)}\n\n"
            "If you did not expect this invitation, ignore this e-mail.\n")
    send_mail(f"Invitation to {tenant_name} on Switchyard", body, None, [email])
