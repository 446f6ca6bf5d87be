"""Console sign-in events go to the audit trail (Django's auth signals are the only hook)."""
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.dispatch import receiver

from audit.actor import Actor
from audit.services import record_event


@receiver(user_logged_in, dispatch_uid="audit_login_ok")
def audit_login_ok(sender, request, user, **kwargs):
    record_event(actor=Actor.for_user(user), action="auth.login", target=user)


@receiver(user_logged_out, dispatch_uid="audit_logout")
def audit_logout(sender, request, user, **kwargs):
    if user is not None:
        record_event(actor=Actor.for_user(user), action="auth.logout", target=user)


@receiver(user_login_failed, dispatch_uid="audit_login_failed")
def audit_login_failed(sender, credentials, request=None, **kwargs):
    # `credentials` has the password already cleansed by Django; keep only the username.
    username = str(credentials.get("username", ""))[:150]
    record_event(actor=Actor.anonymous(username or "anonymous"), action="auth.login_failed",
                 after={"username": username})
