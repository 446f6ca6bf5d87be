"""manage.py create_api_key --tenant SLUG --scope inference [--scope admin] [--name N] [--user EMAIL] [--role R]
[--expires-days D]"""
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from apikeys.scopes import Scope
from apikeys.services import create_api_key
from audit.actor import Actor
from tenants.management.commands.create_tenant import _message
from tenants.models import Membership, Tenant
from tenants.roles import Role


class Command(BaseCommand):
    help = "Mint an API key for a tenant and print it once."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--scope", action="append", choices=Scope.values, required=True)
        parser.add_argument("--name", default="cli key")
        parser.add_argument("--user", help="email of the member the key belongs to (default: a service key)")
        parser.add_argument("--role", choices=Role.values, default=Role.DEVELOPER)
        parser.add_argument("--expires-days", type=int)

    def handle(self, *args, tenant, scope, name, user, role, expires_days, **options):
        tenant_obj = Tenant.objects.filter(slug=tenant).first()
        if tenant_obj is None:
            raise CommandError(f"no tenant with slug {tenant!r}")
        owner = self._member(tenant_obj, user) if user else None
        expires_at = timezone.now() + timedelta(days=expires_days) if expires_days else None
        try:
            minted = create_api_key(tenant=tenant_obj, name=name, scopes=scope, role=role, user=owner,
                                    expires_at=expires_at, actor=Actor.system("cli:create_api_key"))
        except ValidationError as exc:
            raise CommandError(_message(exc)) from None
        scopes = ", ".join(minted.api_key.scopes)
        self.stdout.write(f"key {minted.api_key.prefix}… for tenant {tenant} (scopes: {scopes})")
        self.stdout.write(f"API key (shown once, store it now): {minted.raw}")

    def _member(self, tenant, email):
        membership = Membership.objects.filter(tenant=tenant, user__email__iexact=email).select_related("user").first()
        if membership is None:
            raise CommandError(f"{email} is not a member of {tenant.slug}")
        return membership.user
