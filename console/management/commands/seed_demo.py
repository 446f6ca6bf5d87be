"""manage.py seed_demo — the demo that `make run` starts with (idempotent)."""
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from apikeys.models import ApiKey
from apikeys.scopes import Scope
from apikeys.services import create_api_key, revoke_api_key
from audit.actor import Actor
from tenants.models import Tenant
from tenants.roles import Role
from tenants.services import add_member, create_tenant, set_platform_admin_password

DEMO_SLUG = "demo"
DEMO_KEY_NAME = "demo key (make run)"
DEMO_DEPLOYMENT = "tiny-coder"


class Command(BaseCommand):
    help = "Create the platform admin and the demo tenant; print a fresh demo API key."

    def add_arguments(self, parser):
        parser.add_argument("--admin-username", default="admin")
        parser.add_argument("--reset-admin-password", action="store_true")
        parser.add_argument("--no-deploy", action="store_true", help="skip the tiny-coder model and deployment")
        parser.add_argument("--runtime", choices=("auto", "local", "simulator"), default="auto",
                            help="the demo deployment's engine: real vLLM (local), the simulator, or local when "
                                 "the engine virtualenv exists (auto); used when the deployment is first created")

    def handle(self, *args, admin_username, reset_admin_password, no_deploy, runtime, **options):
        actor = Actor.system("seed_demo")
        password = self._platform_admin(admin_username, reset_admin_password, actor)
        with transaction.atomic():
            tenant = Tenant.objects.filter(slug=DEMO_SLUG).first() or self._demo_tenant(actor)
            for old in ApiKey.objects.usable().filter(tenant=tenant, name=DEMO_KEY_NAME):
                revoke_api_key(old, actor=actor)  # one live demo key at a time
            owner = tenant.memberships.filter(role=Role.OWNER).select_related("user").first()
            minted = create_api_key(tenant=tenant, name=DEMO_KEY_NAME, user=owner.user, role=Role.OWNER,
                                    scopes=[Scope.INFERENCE, Scope.ADMIN], actor=actor)
        runtime = "none" if no_deploy else self._demo_deployment(tenant, actor, runtime)
        self.stdout.write(f"SEED runtime={runtime}")
        shown = password or "(unchanged since first seed; `make run RESET_ADMIN=1` sets a new one)"
        for name, value in (("admin_user", admin_username), ("admin_password", shown),
                            ("tenant", tenant.slug), ("api_key", minted.raw)):
            self.stdout.write(f"SEED {name}={value}")

    def _platform_admin(self, username: str, reset: bool, actor: Actor) -> str | None:
        if not reset and get_user_model().objects.filter(username=username).exists():
            return None
        return set_platform_admin_password(username=username, actor=actor)

    def _demo_tenant(self, actor) -> Tenant:
        tenant = create_tenant(slug=DEMO_SLUG, name="Demo tenant", actor=actor)
        add_member(tenant=tenant, email="demo-owner@switchyard.local", username="demo-owner", role=Role.OWNER,
                   actor=actor)
        return tenant

    def _demo_deployment(self, tenant, actor, wanted: str) -> str:
        """tiny-coder for the demo tenant: real vLLM when the engine venv exists, else the simulator."""
        from fleet.models import BuiltinRuntime, Deployment
        from fleet.services import create_deployment
        from models_registry.services import ensure_tiny_coder

        existing = Deployment.objects.filter(tenant=tenant, name=DEMO_DEPLOYMENT).first()
        if existing is not None:
            return existing.runtime_backend
        if wanted == "simulator":
            runtime = BuiltinRuntime.SIMULATOR
        else:
            runtime = BuiltinRuntime.LOCAL if self._built_tiny_model() else BuiltinRuntime.SIMULATOR
            if wanted == "local" and runtime != BuiltinRuntime.LOCAL:
                raise CommandError("--runtime local, but the tiny model could not be built for the engine")
        version = ensure_tiny_coder(model_dir=self._model_dir(), actor=actor)
        create_deployment(tenant=tenant, name=DEMO_DEPLOYMENT, model_version=version, actor=actor,
                          runtime_backend=runtime, min_replicas=1, max_replicas=2)
        return runtime

    def _model_dir(self) -> Path:
        return Path(settings.SWITCHYARD_MODEL_ROOT) / "tiny-coder"

    def _built_tiny_model(self) -> bool:
        if not Path(settings.SWITCHYARD_ENGINE_PYTHON).exists():
            self.stderr.write("NOTICE: no engine virtualenv (.venv-engine): the demo deploys on the simulator")
            return False
        try:
            call_command("make_tiny_model", str(self._model_dir()), stdout=self.stderr)
        except CommandError as exc:
            self.stderr.write(f"NOTICE: the tiny model could not be built ({exc}); the demo deploys on the simulator")
            return False
        return True
