"""The allow-list against the installed engine's real `--help=all` (the stored snapshot is checked in
test_engine_args)."""
import re
import subprocess
from pathlib import Path

import pytest
from django.conf import settings

from models_registry.engine_args import ENGINE_FLAGS, REFUSED_FLAGS, flag_name

ENGINE_PYTHON = Path(settings.BASE_DIR) / ".venv-engine" / "bin" / "python"
SNAPSHOT = Path(__file__).with_name("vllm_0_32_flags.txt")

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not ENGINE_PYTHON.exists(), reason=".venv-engine is absent (build it with `make engine`)"),
]


@pytest.fixture(scope="module")
def real_flags() -> set[str]:
    result = subprocess.run([str(ENGINE_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--help=all"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return set(re.findall(r"^  --([a-z0-9-]+)", result.stdout, flags=re.MULTILINE))


def test_every_allowed_and_refused_flag_exists(real_flags):
    names = [flag_name(name)[2:] for name in [*ENGINE_FLAGS, *REFUSED_FLAGS]]
    assert [name for name in names if name not in real_flags] == []


def test_the_stored_snapshot_matches_the_installed_engine(real_flags):
    stored = {line.split()[0] for line in SNAPSHOT.read_text().splitlines() if line and not line.startswith("#")}
    assert stored == real_flags
