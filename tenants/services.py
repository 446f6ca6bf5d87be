"""Tenant, membership, invitation and platform-admin writes. Each runs in one transaction with its audit event."""
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.actor import Actor
from audit.services import record_event
from tenants import invitation_links as links
from tenants.models import Invitation, InvitationStatus, Membership, Tenant, TenantStatus
from tenants.roles import Role

TENANT_EDITABLE = ("name", "region", "isolation", "redaction_mode", "cancel_superseded")


def tenant_view(tenant: Tenant) -> dict:
    return {"slug": tenant.slug, "name": tenant.name, "status": tenant.status,
            "region": tenant.region, "isolation": tenant.isolation, "redaction_mode": tenant.redaction_mode,
            "cancel_superseded": tenant.cancel_superseded}


def membership_view(membership: Membership) -> dict:
    return {"user": membership.user.get_username(), "email": membership.user.email, "role": membership.role}


def create_tenant(*, slug: str, name: str, region: str = "local", isolation: str = "shared",
                  admin_email: str | None = None, actor: Actor) -> Tenant:
    """Create a tenant with its tenant-wide quota policy (default limits), and invite its first owner.

    `admin_email` receives an owner invitation by e-mail (a one-time link); the REST API and the
    console require it, so no tenant is left without a way to get an owner. Operators who add an
    owner at once use `add_member` (manage.py create_tenant --admin-email).
    """
    from quotas.services import create_quota_policy

    tenant = Tenant(slug=slug, name=name, region=region, isolation=isolation)
    tenant.full_clean()
    with transaction.atomic():
        tenant.save()
        record_event(actor=actor, action="tenant.create", tenant=tenant, target=tenant, after=tenant_view(tenant))
        create_quota_policy(tenant=tenant, actor=actor)
        if admin_email:
            invite_member(tenant=tenant, email=admin_email, role=Role.OWNER, actor=actor)
    return tenant


def update_tenant(tenant: Tenant, *, actor: Actor, **changes) -> Tenant:
    """Change a tenant's name, region label, isolation, secret-redaction mode or supersession setting."""
    unknown = set(changes) - set(TENANT_EDITABLE)
    if unknown:
        raise ValidationError({name: "This field cannot be changed here." for name in sorted(unknown)})
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        before = tenant_view(tenant)
        for name, value in changes.items():
            setattr(tenant, name, value)
        tenant.full_clean()
        tenant.save()
        record_event(actor=actor, action="tenant.update", tenant=tenant, target=tenant, before=before,
                     after=tenant_view(tenant))
    return tenant


def set_tenant_status(tenant: Tenant, status: str, *, actor: Actor) -> Tenant:
    """Suspend or reactivate a tenant (a suspended tenant's keys stop working at the gateway)."""
    if status not in TenantStatus.values:
        raise ValidationError({"status": f"Choose one of: {', '.join(TenantStatus.values)}."})
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        if tenant.status == status:
            return tenant
        before = tenant_view(tenant)
        tenant.status = status
        tenant.save(update_fields=["status", "updated_at"])
        action = "tenant.suspend" if status == TenantStatus.SUSPENDED else "tenant.activate"
        record_event(actor=actor, action=action, tenant=tenant, target=tenant, before=before, after=tenant_view(tenant))
    return tenant


def delete_tenant(tenant: Tenant, *, actor: Actor) -> None:
    """Delete a tenant with its members, keys and quotas; its audit events stay.

    Not while it has deployments: their engines must be drained and stopped first (DELETE each one).
    """
    from fleet.models import Deployment

    count = Deployment.objects.filter(tenant=tenant).count()
    if count:
        raise ValidationError({"tenant": f"The tenant still has {count} deployment(s); delete them first "
                                         "(their engines are drained and stopped), then the tenant."})
    with transaction.atomic():
        record_event(actor=actor, action="tenant.delete", tenant=tenant, target=tenant, before=tenant_view(tenant))
        tenant.delete()


def invitation_view(invitation: Invitation) -> dict:
    return {"email": invitation.email, "role": invitation.role, "status": invitation.status,
            "expires_at": invitation.expires_at.isoformat()}


def add_member(*, tenant: Tenant, email: str, role: str, username: str | None = None, actor: Actor) -> Membership:
    """Add the account with `email` (or a new one without a usable password) to a tenant at once.

    For operators only (`create_tenant --admin-email`, the demo seed), who may see every account:
    the answer tells whether the address had an account. Tenant admins invite instead (`invite_member`).
    """
    _check_role(role)
    email = get_user_model().objects.normalize_email(email)
    with transaction.atomic():
        user = _user_for_email(email, username)
        if Membership.objects.filter(tenant=tenant, user=user).exists():
            raise ValidationError({"email": "This user is already a member of the tenant."})
        membership = Membership.objects.create(tenant=tenant, user=user, role=role)
        record_event(actor=actor, action="member.add", tenant=tenant, target=membership,
                     after=membership_view(membership))
    return membership


def _user_for_email(email: str, username: str | None):
    User = get_user_model()
    user = User.objects.filter(email__iexact=email).order_by("pk").first()
    if user is not None:
        return user
    username = username or email
    if User.objects.filter(username=username).exists():
        raise ValidationError({"username": "A different user already has this username."})
    user = User(username=username, email=email)
    user.set_unusable_password()  # they sign in once an operator sets a password or SSO links them
    user.full_clean()
    user.save()
    return user


def set_platform_admin_password(*, username: str, actor: Actor) -> str:
    """Give the platform admin `username` a new random password (creating the superuser if missing); return it."""
    User = get_user_model()
    password = secrets.token_urlsafe(12)
    with transaction.atomic():
        user = User.objects.select_for_update().filter(username=username).first()
        action = "platform_admin.create" if user is None else "platform_admin.password_reset"
        if user is None:
            user = User.objects.create_superuser(username=username, email=f"{username}@switchyard.local",
                                                 password=password)
        else:
            user.set_password(password)
            user.save(update_fields=["password"])
        record_event(actor=actor, action=action, target=user,
                     after={"username": username, "is_superuser": user.is_superuser})
    return password


def invite_member(*, tenant: Tenant, email: str, role: str, username: str = "", actor: Actor) -> Invitation:
    """Offer `role` in `tenant` to whoever holds `email`; a pending invitation to it is renewed.

    No account is looked up: the answer is the same whether or not one has this address. Only the
    tenant's own members are checked, whom the inviter can list anyway.
    """
    _check_role(role)
    email = invitation_email(email)
    with transaction.atomic():
        if Membership.objects.filter(tenant=tenant, user__email__iexact=email).exists():
            raise ValidationError({"email": "A member of this tenant has this e-mail address already."})
        invitation = Invitation.objects.select_for_update().filter(
            tenant=tenant, email=email, status=InvitationStatus.PENDING).first()
        before = invitation_view(invitation) if invitation else None
        invitation = invitation or Invitation(tenant=tenant, email=email)
        invitation.role, invitation.username, invitation.invited_by = role, username or "", actor.user
        invitation.expires_at = timezone.now() + timedelta(days=settings.SWITCHYARD_INVITATION_DAYS)
        token = links.new_token()
        invitation.token_hash = links.hash_token(token)  # a renewal replaces the link: the old one stops working
        invitation.full_clean()
        invitation.save()
        record_event(actor=actor, action="member.invite", tenant=tenant, target=invitation, before=before,
                     after=invitation_view(invitation))
        transaction.on_commit(lambda: links.send_invitation_mail(
            email=email, tenant_name=tenant.name, role=Role(role).label.lower(), expires_at=invitation.expires_at,
            token=token))
    return invitation


def invitation_for_token(token: str) -> Invitation | None:
    """The invitation a link's token belongs to, whatever its state (the page says why a link is dead)."""
    if not token or len(token) > 100:
        return None
    return Invitation.objects.select_related("tenant").filter(token_hash=links.hash_token(token)).first()


def join_with_password(invitation: Invitation, *, username: str, password: str,
                       actor: Actor | None = None) -> Membership:
    """An invitee without an account creates one through the link (local sign-in) and joins at once.

    The link proves control of the address, as a password-reset link would. An address that already
    has an account signs in and accepts instead: a link never sets an existing account's password.
    """
    User = get_user_model()
    if not settings.SWITCHYARD_LOCAL_SIGNIN:
        raise ValidationError({"password": "Password sign-in is turned off: sign in through single sign-on."})
    with transaction.atomic():
        invitation = Invitation.objects.select_for_update().select_related("tenant").get(pk=invitation.pk)
        if not invitation.is_open(timezone.now()):
            raise ValidationError({"invitation": "This invitation is no longer open."})
        if User.objects.filter(email__iexact=invitation.email).exists():
            raise ValidationError({"email": "An account has this address already: sign in to accept."})
        user = User(username=username, email=invitation.email)
        user.set_password(password)
        user.full_clean()
        user.save()
        actor = actor or Actor.for_user(user)  # by default the new account acts: it is who followed the link
        record_event(actor=actor, action="user.create", target=user,
                     after={"username": user.username, "email": user.email, "via": "invitation"})
        return accept_invitation(invitation, user=user, actor=actor)


def accept_invitation(invitation: Invitation, *, user, actor: Actor) -> Membership:
    """The account holding the invitation's address joins the tenant with its role."""
    with transaction.atomic():
        invitation = _open_invitation(invitation, user)
        membership, created = Membership.objects.get_or_create(tenant=invitation.tenant, user=user,
                                                               defaults={"role": invitation.role})
        _close_invitation(invitation, InvitationStatus.ACCEPTED, actor, "member.invitation_accept", accepted_by=user)
        if created:
            record_event(actor=actor, action="member.add", tenant=invitation.tenant, target=membership,
                         after={**membership_view(membership), "invitation": invitation.pk})
    return membership


def decline_invitation(invitation: Invitation, *, user, actor: Actor) -> Invitation:
    """The invitee says no; the invitation is closed."""
    with transaction.atomic():
        invitation = _open_invitation(invitation, user)
        return _close_invitation(invitation, InvitationStatus.DECLINED, actor, "member.invitation_decline")


def revoke_invitation(invitation: Invitation, *, actor: Actor) -> Invitation:
    """A tenant admin withdraws a pending invitation."""
    with transaction.atomic():
        invitation = Invitation.objects.select_for_update().select_related("tenant").get(pk=invitation.pk)
        if invitation.status != InvitationStatus.PENDING:
            raise ValidationError({"status": f"This invitation is {invitation.status} already."})
        return _close_invitation(invitation, InvitationStatus.REVOKED, actor, "member.invitation_revoke")


def invitation_email(email: str) -> str:
    """Invitations hold addresses lower-cased, so one address has one pending invitation per tenant."""
    return get_user_model().objects.normalize_email((email or "").strip()).lower()


def _open_invitation(invitation: Invitation, user) -> Invitation:
    invitation = Invitation.objects.select_for_update().select_related("tenant").get(pk=invitation.pk)
    if not invitation.is_open(timezone.now()):
        raise ValidationError({"invitation": "This invitation is no longer open."})
    if invitation_email(user.email) != invitation.email:
        raise ValidationError({"invitation": "This invitation is for another e-mail address."})
    return invitation


def _close_invitation(invitation: Invitation, status: str, actor: Actor, action: str, *, accepted_by=None):
    before = invitation_view(invitation)
    invitation.status, invitation.accepted_by = status, accepted_by
    invitation.save(update_fields=["status", "accepted_by", "updated_at"])
    record_event(actor=actor, action=action, tenant=invitation.tenant, target=invitation, before=before,
                 after=invitation_view(invitation))
    return invitation


def change_member_role(membership: Membership, role: str, *, actor: Actor) -> Membership:
    """Change a member's role; their keys are capped to the new role automatically."""
    _check_role(role)
    with transaction.atomic():
        membership = Membership.objects.select_for_update().select_related("user").get(pk=membership.pk)
        if membership.role == role:
            return membership
        _keep_an_owner(membership, leaving=role != Role.OWNER)
        before = membership_view(membership)
        membership.role = role
        membership.save(update_fields=["role", "updated_at"])
        record_event(actor=actor, action="member.update", tenant=membership.tenant, target=membership,
                     before=before, after=membership_view(membership))
    return membership


def remove_member(membership: Membership, *, actor: Actor) -> None:
    """Remove a member, revoking every API key and per-object grant they hold in the tenant."""
    from apikeys.services import revoke_user_keys

    with transaction.atomic():
        membership = Membership.objects.select_for_update().select_related("user", "tenant").get(pk=membership.pk)
        _keep_an_owner(membership, leaving=True)
        revoke_user_keys(tenant=membership.tenant, user=membership.user, actor=actor)
        for grant in tenant_grants(membership.tenant).filter(user=membership.user):
            revoke_permission(grant, actor=actor)  # a grant outlives no membership
        _revoke_object_grants(membership.tenant, membership.user, actor)
        record_event(actor=actor, action="member.remove", tenant=membership.tenant, target=membership,
                     before=membership_view(membership))
        membership.delete()


def _keep_an_owner(membership: Membership, *, leaving: bool) -> None:
    """A tenant with owners keeps at least one: the last owner cannot leave or be demoted."""
    if not leaving or membership.role != Role.OWNER:
        return
    others = Membership.objects.filter(tenant=membership.tenant, role=Role.OWNER).exclude(pk=membership.pk)
    if not others.exists():
        raise ValidationError({"role": "A tenant needs at least one owner; promote another member first."})


def _check_role(role: str) -> None:
    if role not in Role.values:
        raise ValidationError({"role": f"Choose one of: {', '.join(Role.values)}."})


def grant_view(grant) -> dict:
    return {"user": grant.user.get_username(), "permission": grant.permission.codename}


def grant_permission(*, tenant: Tenant, user, perm: str, actor: Actor):
    """Give one member one tenant permission beyond their role (a guardian grant on this tenant only).

    The caller checks that the granter holds `perm` and outranks or equals the member (as for roles).
    Granting what is already granted changes and audits nothing.
    """
    from guardian.shortcuts import assign_perm

    _check_perm(perm)
    with transaction.atomic():
        if not Membership.objects.filter(tenant=tenant, user=user).exists():
            raise ValidationError({"user_id": "No such member in this tenant."})
        existing = _grants_of(tenant).filter(user=user, permission__codename=perm).first()
        if existing is not None:
            return existing
        assign_perm(f"tenants.{perm}", user, tenant)
        grant = _grants_of(tenant).select_related("user", "permission").get(user=user, permission__codename=perm)
        record_event(actor=actor, action="member.grant", tenant=tenant, target=grant, after=grant_view(grant))
    return grant


def revoke_permission(grant, *, actor: Actor) -> None:
    """Withdraw one per-object grant; the member keeps what their role gives."""
    with transaction.atomic():
        tenant = Tenant.objects.get(pk=int(grant.object_pk))
        record_event(actor=actor, action="member.grant_revoke", tenant=tenant, target=grant, before=grant_view(grant))
        grant.delete()


def _grants_of(tenant: Tenant):
    """Guardian's user grants on this very tenant (never global permissions)."""
    from django.contrib.contenttypes.models import ContentType
    from guardian.models import UserObjectPermission

    return UserObjectPermission.objects.filter(content_type=ContentType.objects.get_for_model(Tenant),
                                               object_pk=str(tenant.pk))


def tenant_grants(tenant: Tenant):
    """The per-object grants on a tenant, with their users and permissions."""
    return _grants_of(tenant).select_related("user", "permission").order_by("user__username", "permission__codename")


def _check_perm(perm: str) -> None:
    from tenants.roles import Perm

    if perm not in Perm.values:
        raise ValidationError({"permission": f"Choose one of: {', '.join(Perm.values)}."})


def object_grant_view(grant, obj) -> dict:
    """The audit record's shape of a per-object grant: who, what, on which object."""
    from tenants.object_grants import grantable_for

    return {"user": grant.user.get_username(), "permission": grant.permission.codename,
            "object_type": grantable_for(obj).kind, "object_id": obj.pk, "object": str(obj)}


def grant_object_permission(*, obj, user, perm: str, actor: Actor):
    """Give one member of `obj`'s tenant one permission on `obj` alone (tenants.object_grants.GRANTABLE).

    The caller checks that the granter holds what `perm` stands for in the tenant and outranks or equals
    the member. Granting what is already granted changes and audits nothing.
    """
    from guardian.shortcuts import assign_perm

    from tenants.object_grants import grantable_for, grants_on

    grantable = grantable_for(obj)
    if perm not in grantable.perms:
        raise ValidationError({"permission": f"Choose one of: {', '.join(grantable.perms)}."})
    if obj.tenant_id is None:
        raise ValidationError({grantable.kind: "Shared pools belong to no tenant: they take no per-object grants."})
    with transaction.atomic():
        if not Membership.objects.filter(tenant_id=obj.tenant_id, user=user).exists():
            raise ValidationError({"user_id": "No such member in this tenant."})
        existing = grants_on(obj).filter(user=user, permission__codename=perm).first()
        if existing is not None:
            return existing
        assign_perm(perm, user, obj)
        grant = grants_on(obj).get(user=user, permission__codename=perm)
        record_event(actor=actor, action="member.object_grant", tenant=obj.tenant, target=grant,
                     after=object_grant_view(grant, obj))
    return grant


def revoke_object_permission(grant, *, actor: Actor) -> None:
    """Withdraw one per-object grant; the member keeps what their role and other grants give."""
    with transaction.atomic():
        obj = grant.content_type.get_object_for_this_type(pk=grant.object_pk)
        record_event(actor=actor, action="member.object_grant_revoke", tenant=obj.tenant, target=grant,
                     before=object_grant_view(grant, obj))
        grant.delete()


def _revoke_object_grants(tenant: Tenant, user, actor: Actor) -> None:
    from tenants.object_grants import GRANTABLE, grants_of_user_in_tenant

    for grantable in GRANTABLE.values():
        for grant in grants_of_user_in_tenant(grantable, tenant, user):
            revoke_object_permission(grant, actor=actor)
