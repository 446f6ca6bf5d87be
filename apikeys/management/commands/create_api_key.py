"""manage.py create_api_key (--tenant SLUG --scope S [--scope S] | --platform) [--name N] [--user EMAIL|USERNAME]
[--role R] [--expires-days D]"""
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q
from django.utils import timezone

from apikeys.scopes import Scope
from apikeys.services import create_api_key, create_platform_key
from audit.actor import Actor
from tenants.management.commands.create_tenant import _message
from tenants.models import Membership, Tenant
from tenants.roles import Role


class Command(BaseCommand):
    help = "Mint an API key for a tenant, or a platform key (--platform), and print it once."

    def add_arguments(self, parser):
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--tenant", help="tenant slug")
        where.add_argument("--platform", action="store_true",
                           help="a tenant-less key with platform powers (scope admin), acting as a platform admin")
        parser.add_argument("--scope", action="append", choices=Scope.values, help="required with --tenant")
        parser.add_argument("--name", help="what the key is for (default: 'cli key' / 'platform automation')")
        parser.add_argument("--user", help="email of the member the key belongs to (default: a service key); "
                                           "with --platform, the platform admin (email or username) it acts as — "
                                           "default: the only superuser")
        parser.add_argument("--role", choices=Role.values, default=Role.DEVELOPER)
        parser.add_argument("--expires-days", type=int)

    def handle(self, *args, tenant, platform, scope, name, user, role, expires_days, **options):
        expires_at = timezone.now() + timedelta(days=expires_days) if expires_days else None
        try:
            if platform:
                self._platform_key(name or "platform automation", user, expires_at)
            else:
                self._tenant_key(tenant, scope, name or "cli key", user, role, expires_at)
        except ValidationError as exc:
            raise CommandError(_message(exc)) from None

    def _tenant_key(self, slug, scope, name, user, role, expires_at):
        if not scope:
            raise CommandError("--scope is required with --tenant")
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            raise CommandError(f"no tenant with slug {slug!r}")
        owner = self._member(tenant, user) if user else None
        minted = create_api_key(tenant=tenant, name=name, scopes=scope, role=role, user=owner,
                                expires_at=expires_at, actor=Actor.system("cli:create_api_key"))
        scopes = ", ".join(minted.api_key.scopes)
        self.stdout.write(f"key {minted.api_key.prefix}… for tenant {slug} (scopes: {scopes})")
        self.stdout.write(f"API key (shown once, store it now): {minted.raw}")

    def _platform_key(self, name, user, expires_at):
        admin = self._platform_admin(user)
        minted = create_platform_key(name=name, user=admin, expires_at=expires_at,
                                     actor=Actor.system("cli:create_api_key"))
        self.stdout.write(f"platform key {minted.api_key.prefix}… acting as {admin.get_username()} (scopes: admin)")
        self.stdout.write(f"API key (shown once, store it now): {minted.raw}")

    def _platform_admin(self, who):
        staff = get_user_model().objects.filter(Q(is_staff=True) | Q(is_superuser=True), is_active=True)
        if who:
            found = staff.filter(Q(username=who) | Q(email__iexact=who)).order_by("pk").first()
            if found is None:
                raise CommandError(f"{who} is not an active platform admin (staff user)")
            return found
        superusers = list(staff.filter(is_superuser=True)[:2])
        if len(superusers) != 1:
            raise CommandError("name the platform admin the key acts as with --user "
                               f"({'no' if not superusers else 'more than one'} superuser to default to)")
        return superusers[0]

    def _member(self, tenant, email):
        membership = Membership.objects.filter(tenant=tenant, user__email__iexact=email).select_related("user").first()
        if membership is None:
            raise CommandError(f"{email} is not a member of {tenant.slug}")
        return membership.user
