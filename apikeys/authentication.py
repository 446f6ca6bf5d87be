"""`Authorization: Bearer sy_…` authentication for the admin REST API.

Only that header is read: a key in the query string or any other header authenticates nothing.
Rejections are audited by the key's display prefix; the raw key is never logged or stored.
"""
import hmac

from django.contrib.auth.models import AnonymousUser
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from apikeys import keyformat
from apikeys.models import ApiKey
from apikeys.rejections import rejection_row_extras
from apikeys.services import record_key_use
from audit.actor import Actor
from audit.services import record_event


class KeyRejected(Exception):
    """A presented key is unusable; `reason` is safe to show, `prefix` may be empty."""

    def __init__(self, reason: str, prefix: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.prefix = prefix


class ServiceKeyUser(AnonymousUser):
    """The `request.user` of a service key (one that belongs to no person)."""

    def __init__(self, api_key: ApiKey):
        self.api_key = api_key

    @property
    def is_authenticated(self):
        return True

    def get_username(self):
        return f"service key {self.api_key.prefix}"


def resolve_key(raw: str) -> ApiKey:
    """The usable key for `raw`, or KeyRejected. A malformed key costs no database query."""
    if not keyformat.is_well_formed(raw):
        raise KeyRejected("malformed API key")
    prefix = keyformat.display_prefix(raw)
    digest = keyformat.hash_key(raw)
    key = ApiKey.objects.select_related("tenant", "user").filter(key_hash=digest).first()
    if key is None or not hmac.compare_digest(key.key_hash, digest):
        raise KeyRejected("unknown API key", prefix)
    state = key.state(timezone.now())
    if state != "active":
        raise KeyRejected(f"{state} API key", prefix)
    if key.user_id is not None and not key.user.is_active:
        raise KeyRejected("API key of a deactivated user", prefix)
    return key


class ApiKeyAuthentication(BaseAuthentication):
    """DRF authentication by API key; returns (user, ApiKey)."""

    def authenticate(self, request):
        scheme, _, credential = get_authorization_header(request).decode("latin-1").partition(" ")
        if scheme.lower() != "bearer":
            return None
        try:
            key = resolve_key(credential.strip())
        except KeyRejected as rejected:
            _audit_rejection(rejected)
            raise exceptions.AuthenticationFailed(f"Invalid credentials: {rejected.reason}.") from None
        record_key_use(key)
        return (key.user if key.user_id else ServiceKeyUser(key), key)

    def authenticate_header(self, request):
        return 'Bearer realm="switchyard"'


def _audit_rejection(rejected: KeyRejected) -> None:
    """One audit row per (prefix, reason) and window, not per attempt (apikeys.rejections)."""
    label = rejected.prefix or "unidentified key"
    extras = rejection_row_extras(label, rejected.reason)
    if extras is None:
        return
    record_event(actor=Actor.anonymous(label), action="auth.api_key_rejected",
                 after={"reason": rejected.reason, "prefix": rejected.prefix or None, **extras})
