"""manage.py make_tiny_model [DIR] [--register]: build the tiny CPU model with the engine venv."""
import subprocess
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from audit.actor import Actor
from models_registry.artifacts import validate_artifact_uri
from models_registry.services import ensure_tiny_coder

BUILDER = Path(__file__).resolve().parents[2] / "tiny_model_builder.py"


def _engine_python() -> str:
    default = Path(settings.BASE_DIR) / ".venv-engine" / "bin" / "python"
    return str(getattr(settings, "SWITCHYARD_ENGINE_PYTHON", default))


class Command(BaseCommand):
    help = "Build the random-weight tiny-coder model (skipped if DIR is already complete)."

    def add_arguments(self, parser):
        parser.add_argument("model_dir", nargs="?", type=Path, help="default: SWITCHYARD_MODEL_ROOT/tiny-coder")
        parser.add_argument("--python", default=_engine_python(),
                            help="the engine venv's python (it has torch; this venv does not)")
        parser.add_argument("--register", action="store_true", help="also register tiny-coder as a published version")

    def handle(self, *args, model_dir, python, register, **options):
        model_dir = (model_dir or Path(settings.SWITCHYARD_MODEL_ROOT) / "tiny-coder").resolve()
        if register:
            self._check_registrable(model_dir)  # before minutes of building, not after
        if not Path(python).exists():
            raise CommandError(f"{python} not found: build the engine venv first (make engine).")
        # The builder imports torch and transformers, so it runs in the engine venv, not here.
        result = subprocess.run([python, str(BUILDER), str(model_dir)], capture_output=True, text=True)
        if result.returncode != 0:
            raise CommandError(f"building the tiny model failed:\n{result.stderr[-3000:]}")
        self.stdout.write(result.stdout.strip().splitlines()[-1])
        if register:
            self._register(model_dir)

    def _check_registrable(self, model_dir: Path) -> None:
        try:
            validate_artifact_uri(str(model_dir))
        except ValidationError as exc:
            raise CommandError(_message(exc)) from None

    def _register(self, model_dir: Path) -> None:
        try:
            version = ensure_tiny_coder(model_dir=model_dir, actor=Actor.system("cli:make_tiny_model"))
        except ValidationError as exc:
            raise CommandError(_message(exc)) from None
        self.stdout.write(f"registered {version} ({version.status})")


def _message(exc: ValidationError) -> str:
    return "; ".join(f"{field}: {' '.join(messages)}" for field, messages in exc.message_dict.items())
