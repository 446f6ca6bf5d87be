"""manage.py seed_demo — the demo that `make run` starts with (idempotent)."""
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from apikeys.models import ApiKey
from apikeys.scopes import Scope
from apikeys.services import create_api_key, revoke_api_key
from audit.actor import Actor
from tenants.models import Tenant
from tenants.roles import Role
from tenants.services import add_member, create_tenant

DEMO_SLUG = "demo"
DEMO_KEY_NAME = "demo key (make run)"


class Command(BaseCommand):
    help = "Create the platform admin and the demo tenant; print a fresh demo API key."

    def add_arguments(self, parser):
        parser.add_argument("--admin-username", default="admin")
        parser.add_argument("--reset-admin-password", action="store_true")

    def handle(self, *args, admin_username, reset_admin_password, **options):
        actor = Actor.system("seed_demo")
        password = self._platform_admin(admin_username, reset_admin_password)
        with transaction.atomic():
            tenant = Tenant.objects.filter(slug=DEMO_SLUG).first() or self._demo_tenant(actor)
            for old in ApiKey.objects.usable().filter(tenant=tenant, name=DEMO_KEY_NAME):
                revoke_api_key(old, actor=actor)  # one live demo key at a time
            owner = tenant.memberships.filter(role=Role.OWNER).select_related("user").first()
            minted = create_api_key(tenant=tenant, name=DEMO_KEY_NAME, user=owner.user, role=Role.OWNER,
                                    scopes=[Scope.INFERENCE, Scope.ADMIN], actor=actor)
        shown = password or "(unchanged since first seed; `make run RESET_ADMIN=1` sets a new one)"
        for name, value in (("admin_user", admin_username), ("admin_password", shown),
                            ("tenant", tenant.slug), ("api_key", minted.raw)):
            self.stdout.write(f"SEED {name}={value}")

    def _platform_admin(self, username: str, reset: bool) -> str | None:
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        if user is not None and not reset:
            return None
        password = secrets.token_urlsafe(12)
        if user is None:
            User.objects.create_superuser(username=username, email=f"{username}@switchyard.local", password=password)
        else:
            user.set_password(password)
            user.save(update_fields=["password"])
        return password

    def _demo_tenant(self, actor) -> Tenant:
        tenant = create_tenant(slug=DEMO_SLUG, name="Demo tenant", actor=actor)
        add_member(tenant=tenant, email="demo-owner@switchyard.local", username="demo-owner", role=Role.OWNER, actor=actor)
        return tenant
