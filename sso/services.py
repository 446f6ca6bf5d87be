"""Signing in through an OpenID Connect provider: the identity, the account, and the group → role mapping."""
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.actor import Actor
from audit.services import record_event
from sso.models import OidcIdentity
from tenants import services as tenant_services
from tenants.models import Membership, Tenant
from tenants.roles import ROLE_RANK, Role


def roles_from_groups(groups, prefix: str) -> dict[str, str]:
    """`<prefix>:<tenant slug>:<role>` groups → {slug: highest role}; anything else is ignored."""
    wanted: dict[str, str] = {}
    for group in groups or ():
        parts = str(group).split(":")
        if len(parts) != 3 or parts[0] != prefix or parts[2] not in Role.values:
            continue
        slug, role = parts[1], parts[2]
        if slug not in wanted or ROLE_RANK[Role(role)] > ROLE_RANK[Role(wanted[slug])]:
            wanted[slug] = role
    return wanted


def sign_in_with_oidc(*, provider, claims: dict, actor: Actor | None = None) -> object:
    """The user behind verified ID-token claims, created at first sign-in; memberships follow the groups.

    Each sign-in applies the mapping: a tenant whose group appeared is joined, a changed role is
    changed, a tenant whose group disappeared is left (its keys revoked) — but only tenants a group
    named before, never a membership that came from an invitation alone. Every change is audited with the
    provider as the actor; the sign-in itself is audited by the console's sign-in signal.
    """
    actor = actor or Actor.system(f"sso:{provider.name}")  # the provider's word, applied by us
    with transaction.atomic():
        identity = _identity(provider, claims, actor)
        groups = claims.get(provider.groups_claim) or []
        wanted = {slug: role for slug, role in roles_from_groups(groups, provider.group_prefix).items()
                  if Tenant.objects.filter(slug=slug).exists()}
        changes = _apply_mapping(identity, wanted, actor)
        if changes or identity.last_groups != sorted(groups):
            record_event(actor=actor, action="sso.mapping_apply", target=identity.user,
                         before={"groups": identity.last_groups, "tenants": identity.mapped_tenants},
                         after={"groups": sorted(groups), "tenants": sorted(wanted), "changes": changes})
        identity.last_groups, identity.last_sign_in_at = sorted(groups), timezone.now()
        identity.save(update_fields=["last_groups", "mapped_tenants", "last_sign_in_at"])
    return identity.user


def _identity(provider, claims, actor) -> OidcIdentity:
    identity = (OidcIdentity.objects.select_for_update().select_related("user")
                .filter(issuer=claims["iss"], subject=claims["sub"]).first())
    if identity is not None:
        return identity
    from sso.models import ScimAccount

    provisioned = ScimAccount.objects.filter(provider=provider.name, external_id=claims["sub"]).first()
    user = provisioned.user if provisioned else _new_user(claims)  # SCIM's externalId is the IdP's subject
    identity = OidcIdentity.objects.create(user=user, provider=provider.name, issuer=claims["iss"],
                                           subject=claims["sub"])
    record_event(actor=actor, action="sso.identity_create", target=user,
                 after={"username": user.username, "email": user.email, "issuer": claims["iss"],
                        "subject": claims["sub"]})
    return identity


def _new_user(claims):
    """A fresh account for a new (issuer, subject): never an existing account found by e-mail, which the
    provider's user might not own (an invitation accepted after signing in links the two instead)."""
    User = get_user_model()
    base = (claims.get("preferred_username") or claims.get("email") or claims["sub"])[:140]
    username, n = base, 1
    while User.objects.filter(username=username).exists():
        n += 1
        username = f"{base}-{n}"
    user = User(username=username, email=claims.get("email", "") if claims.get("email_verified", True) else "")
    user.set_unusable_password()
    user.save()
    return user


def _apply_mapping(identity, wanted: dict[str, str], actor) -> list[str]:
    changes, identity.mapped_tenants = _apply_roles(identity.user, set(identity.mapped_tenants), wanted, actor)
    return changes


def _apply_roles(user, previously: set, wanted: dict[str, str], actor) -> tuple[list[str], list[str]]:
    """Make `user`'s memberships follow `wanted` ({slug: role}) for the tenants a provider manages.

    Returns the changes made and the tenants the provider manages from now on. A membership a provider
    never named (an invitation's) is left alone; a tenant's last owner is kept.
    """
    changes = []
    memberships = {m.tenant.slug: m for m in Membership.objects.filter(user=user).select_related("tenant")}
    for slug, role in sorted(wanted.items()):
        membership = memberships.get(slug)
        if membership is None:
            tenant = Tenant.objects.get(slug=slug)
            membership = Membership.objects.create(tenant=tenant, user=user, role=role)
            record_event(actor=actor, action="member.add", tenant=tenant, target=membership,
                         after={**tenant_services.membership_view(membership), "via": "sso"})
            changes.append(f"+{slug}:{role}")
        elif membership.role != role:  # a tenant a group names is the provider's to manage from now on
            changes += _guarded(lambda m=membership, r=role: tenant_services.change_member_role(m, r, actor=actor),
                                f"{slug}:{membership.role}->{role}")
    for slug in sorted(previously - set(wanted)):
        if slug in memberships:
            changes += _guarded(lambda m=memberships[slug]: tenant_services.remove_member(m, actor=actor), f"-{slug}")
    kept = {s for s in previously - set(wanted) if s in memberships
            and Membership.objects.filter(pk=memberships[s].pk).exists()}
    return changes, sorted(set(wanted) | kept)


def _guarded(call, label: str) -> list[str]:
    """A tenant's last owner is kept even when the groups say otherwise (tenants.services refuses)."""
    try:
        with transaction.atomic():
            call()
    except ValidationError:
        return [f"kept {label.lstrip('+-')} (the tenant's last owner)"]
    return [label]


# --- SCIM 2.0 provisioning (sso/scim.py speaks the protocol; these make the changes) ---

def scim_create_user(*, provider, user_name: str, email: str, external_id: str = "", active: bool = True,
                     actor: Actor | None = None):
    """A provider provisions an account (no usable password: it signs in through that provider)."""
    from sso.models import ScimAccount

    actor = actor or Actor.system(f"scim:{provider.name}")
    User = get_user_model()
    with transaction.atomic():
        if User.objects.filter(username=user_name).exists():
            raise ValidationError({"userName": "An account has this userName already."})
        user = User(username=user_name, email=email, is_active=active)
        user.set_unusable_password()
        user.full_clean()
        user.save()
        ScimAccount.objects.create(user=user, provider=provider.name, external_id=external_id)
        record_event(actor=actor, action="scim.user_create", target=user, after=_scim_user_view(user, external_id))
    return user


def scim_update_user(user, *, provider, actor: Actor | None = None, **changes):
    """userName, email, externalId and active, as a SCIM PUT or PATCH sets them; active=False deactivates."""
    actor = actor or Actor.system(f"scim:{provider.name}")
    with transaction.atomic():
        user = get_user_model().objects.select_for_update().get(pk=user.pk)
        account = user.scim_account
        before = _scim_user_view(user, account.external_id)
        user.username = changes.get("user_name", user.username)
        user.email = changes.get("email", user.email)
        account.external_id = changes.get("external_id", account.external_id)
        deactivating = user.is_active and changes.get("active") is False
        user.is_active = changes.get("active", user.is_active)
        user.full_clean()
        user.save()
        account.save()
        after = _scim_user_view(user, account.external_id)
        if after != before:
            record_event(actor=actor, action="scim.user_update", target=user, before=before, after=after)
        if deactivating:
            _cut_off(user, actor)
    return user


def _cut_off(user, actor) -> None:
    """A deactivated account: its sessions end and its personal keys are revoked (the gateway drops them
    through the change bus as every revocation)."""
    from django.contrib.sessions.models import Session

    from apikeys.models import ApiKey
    from apikeys.services import revoke_api_key

    for key in ApiKey.objects.usable().filter(user=user):
        revoke_api_key(key, actor=actor)
    ended = [s.pk for s in Session.objects.filter(expire_date__gt=timezone.now())
             if str(s.get_decoded().get("_auth_user_id")) == str(user.pk)]
    Session.objects.filter(pk__in=ended).delete()
    record_event(actor=actor, action="scim.user_deactivate", target=user,
                 after={"username": user.username, "sessions_ended": len(ended)})


def scim_save_group(*, provider, display_name: str, member_ids, external_id: str = "", group=None,
                    actor: Actor | None = None):
    """Create a group or replace one's name and members; every member's roles follow."""
    from sso.models import ScimGroup

    actor = actor or Actor.system(f"scim:{provider.name}")
    with transaction.atomic():
        group = group or ScimGroup(provider=provider.name)
        before_members = set(group.members.values_list("pk", flat=True)) if group.pk else set()
        before = {"displayName": group.display_name, "members": sorted(before_members)} if group.pk else None
        group.display_name, group.external_id = display_name, external_id or group.external_id
        group.full_clean()
        group.save()
        members = set(_provider_users(provider, member_ids).values_list("pk", flat=True))
        group.members.set(members)
        record_event(actor=actor, action="scim.group_save", target=group, before=before,
                     after={"displayName": display_name, "members": sorted(members)})
        _sync_users(provider, before_members | members, actor)
    return group


def scim_delete_group(group, *, provider, actor: Actor | None = None) -> None:
    actor = actor or Actor.system(f"scim:{provider.name}")
    with transaction.atomic():
        members = set(group.members.values_list("pk", flat=True))
        record_event(actor=actor, action="scim.group_delete", target=group,
                     before={"displayName": group.display_name, "members": sorted(members)})
        group.delete()
        _sync_users(provider, members, actor)


def _provider_users(provider, ids):
    """Only accounts this provider provisioned: another provider's or a local account is never touched."""
    clean = [int(i) for i in ids if str(i).isdigit()]
    return get_user_model().objects.filter(pk__in=clean, scim_account__provider=provider.name)


def _sync_users(provider, user_ids, actor) -> None:
    from sso.models import ScimGroup

    for user in _provider_users(provider, list(user_ids)).select_related("scim_account"):
        names = ScimGroup.objects.filter(provider=provider.name, members=user).values_list("display_name", flat=True)
        wanted = {slug: role for slug, role in roles_from_groups(names, provider.group_prefix).items()
                  if Tenant.objects.filter(slug=slug).exists()}
        account = user.scim_account
        _, account.mapped_tenants = _apply_roles(user, set(account.mapped_tenants), wanted, actor)
        account.save(update_fields=["mapped_tenants", "updated_at"])


def _scim_user_view(user, external_id) -> dict:
    return {"userName": user.username, "email": user.email, "active": user.is_active, "externalId": external_id}
