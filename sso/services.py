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
    user = _new_user(claims)
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
    changes = []
    user, previously = identity.user, set(identity.mapped_tenants)
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
    identity.mapped_tenants = sorted(set(wanted) | {s for s in previously - set(wanted) if s in memberships
                                                    and Membership.objects.filter(pk=memberships[s].pk).exists()})
    return changes


def _guarded(call, label: str) -> list[str]:
    """A tenant's last owner is kept even when the groups say otherwise (tenants.services refuses)."""
    try:
        with transaction.atomic():
            call()
    except ValidationError:
        return [f"kept {label.lstrip('+-')} (the tenant's last owner)"]
    return [label]
