"""manage.py create_tenant SLUG --name NAME --admin-email EMAIL [--region R] [--isolation shared|dedicated]"""
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from apikeys.scopes import Scope
from apikeys.services import create_api_key
from audit.actor import Actor
from tenants.models import Isolation
from tenants.roles import Role
from tenants.services import add_member, create_tenant


class Command(BaseCommand):
    help = "Create a tenant with an owner and print the owner's admin API key (shown once)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", required=True)
        parser.add_argument("--admin-email", required=True)
        parser.add_argument("--region", default="local")
        parser.add_argument("--isolation", choices=Isolation.values, default=Isolation.SHARED)

    def handle(self, *args, slug, name, admin_email, region, isolation, **options):
        actor = Actor.system("cli:create_tenant")
        try:
            with transaction.atomic():
                tenant = create_tenant(slug=slug, name=name, region=region, isolation=isolation, actor=actor)
                owner = add_member(tenant=tenant, email=admin_email, role=Role.OWNER, actor=actor)
                minted = create_api_key(tenant=tenant, name=f"{owner.user.email} admin key", user=owner.user,
                                        role=Role.OWNER, scopes=[Scope.ADMIN, Scope.INFERENCE], actor=actor)
        except ValidationError as exc:
            raise CommandError(_message(exc)) from None
        self.stdout.write(f"tenant {tenant.slug} created; owner {owner.user.email}")
        self.stdout.write(f"admin API key (shown once, store it now): {minted.raw}")


def _message(exc: ValidationError) -> str:
    if hasattr(exc, "error_dict"):
        return "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items())
    return " ".join(exc.messages)
