"""Minting, revoking and rotating API keys. The raw key leaves these functions exactly once."""
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from apikeys import keyformat
from apikeys.models import ApiKey
from apikeys.scopes import Scope
from audit.actor import Actor
from audit.services import record_event
from tenants.roles import Role

LAST_USED_RESOLUTION = timedelta(seconds=60)
MAX_ROTATION_GRACE = timedelta(days=30)


@dataclass(frozen=True)
class MintedKey:
    """A freshly created key and its secret — show `raw` to the caller once, then drop it."""

    api_key: ApiKey
    raw: str


def create_api_key(*, tenant, name: str, scopes, role: str = Role.DEVELOPER, user=None,
                   expires_at=None, actor: Actor) -> MintedKey:
    """Mint a key; only its HMAC and display prefix are stored."""
    _validate_key_fields(tenant=tenant, name=name, scopes=scopes, role=role, user=user, expires_at=expires_at)
    with transaction.atomic():
        minted = _insert_key(tenant=tenant, name=name, scopes=sorted(set(scopes)), role=role, user=user,
                             expires_at=expires_at, created_by=actor.user)
        record_event(actor=actor, action="api_key.create", tenant=tenant, target=minted.api_key,
                     after=minted.api_key.audit_view())
    return minted


def create_platform_key(*, name: str, user, expires_at=None, actor: Actor) -> MintedKey:
    """Mint a tenant-less key for platform automation, acting as `user` (who must be platform staff).

    It carries exactly the `admin` scope: platform powers ignore scopes, so a narrower tenant-less
    key would promise a limit it cannot keep. Bound to a person, it loses every power the moment
    that person stops being staff.
    """
    return create_api_key(tenant=None, name=name, scopes=[Scope.ADMIN], role=Role.OWNER, user=user,
                          expires_at=expires_at, actor=actor)


def _insert_key(**fields) -> MintedKey:
    for _ in range(5):  # a prefix collision is astronomically rare; retry rather than fail
        raw = keyformat.generate_key()
        try:
            with transaction.atomic():
                key = ApiKey.objects.create(prefix=keyformat.display_prefix(raw), key_hash=keyformat.hash_key(raw),
                                            **fields)
            return MintedKey(api_key=key, raw=raw)
        except IntegrityError:
            continue
    raise RuntimeError("could not mint a unique API key")


def _validate_key_fields(*, tenant, name, scopes, role, user, expires_at) -> None:
    errors = {}
    if not name or len(name) > 100:
        errors["name"] = "A name of 1 to 100 characters is required."
    if not scopes or not set(scopes) <= set(Scope.values):
        errors["scopes"] = f"Choose one or more of: {', '.join(Scope.values)}."
    if role not in Role.values:
        errors["role"] = f"Choose one of: {', '.join(Role.values)}."
    if expires_at is not None and expires_at <= timezone.now():
        errors["expires_at"] = "The expiry must be in the future."
    if tenant is None and not (user is not None and (user.is_staff or user.is_superuser)):
        errors["tenant"] = "Only platform staff may hold a key that is not bound to a tenant."
    elif tenant is None and set(scopes or ()) != {Scope.ADMIN}:
        errors["scopes"] = "A platform (tenant-less) key carries exactly the admin scope."
    if errors:
        raise ValidationError(errors)


def revoke_api_key(api_key: ApiKey, *, actor: Actor) -> ApiKey:
    """Revoke at once; idempotent (a second revoke changes and audits nothing)."""
    with transaction.atomic():
        key = ApiKey.objects.select_for_update().get(pk=api_key.pk)
        if key.revoked_at is not None:
            return key
        before = key.audit_view()
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        record_event(actor=actor, action="api_key.revoke", tenant=key.tenant, target=key,
                     before=before, after=key.audit_view())
    return key


def rotate_api_key(api_key: ApiKey, *, grace_seconds: int | None = None, actor: Actor) -> MintedKey:
    """Mint a successor with the same grants; the old key keeps working for the grace period."""
    grace = _rotation_grace(grace_seconds)
    with transaction.atomic():
        old = ApiKey.objects.select_for_update().get(pk=api_key.pk)
        if old.state() != "active":
            raise ValidationError({"key": "Only an active key can be rotated."})
        if ApiKey.objects.filter(rotated_from=old).exists():  # rotated_from is one-to-one
            raise ValidationError({"key": "This key was already rotated; rotate its successor instead."})
        minted = _insert_key(tenant=old.tenant, name=old.name, scopes=old.scopes, role=old.role, user=old.user,
                             expires_at=old.expires_at, created_by=actor.user, rotated_from=old)
        before = old.audit_view()
        old_deadline = timezone.now() + grace
        old.expires_at = min(old.expires_at, old_deadline) if old.expires_at else old_deadline
        old.save(update_fields=["expires_at"])
        record_event(actor=actor, action="api_key.rotate", tenant=old.tenant, target=old, before=before,
                     after={**old.audit_view(), "successor": minted.api_key.prefix,
                            "grace_seconds": int(grace.total_seconds())})
    return minted


def _rotation_grace(grace_seconds: int | None) -> timedelta:
    if grace_seconds is None:
        return timedelta(seconds=settings.SWITCHYARD_KEY_ROTATION_GRACE_SECONDS)
    grace = timedelta(seconds=grace_seconds)
    if grace < timedelta(0) or grace > MAX_ROTATION_GRACE:
        raise ValidationError({"grace_seconds": "Choose between 0 and 2592000 seconds (30 days)."})
    return grace


@transaction.atomic
def revoke_user_keys(*, tenant, user, actor: Actor) -> int:
    """Revoke every active key a user holds in a tenant (when they leave it or are demoted): all or none."""
    keys = list(ApiKey.objects.usable().filter(tenant=tenant, user=user))
    for key in keys:
        revoke_api_key(key, actor=actor)
    return len(keys)


def record_key_use(api_key: ApiKey) -> None:
    """Refresh `last_used_at`, at most once a minute per key (telemetry, not an audited change)."""
    now = timezone.now()
    if api_key.last_used_at and now - api_key.last_used_at < LAST_USED_RESOLUTION:
        return
    ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
    api_key.last_used_at = now
