"""ensure_tiny_coder: the demo seed's one call that makes tiny-coder deployable, safe to repeat."""
import pytest
from django.core.exceptions import ValidationError

from models_registry.engine_args import render_vllm_argv
from models_registry.models import Model, ModelVersion, VersionStatus
from models_registry.services import deprecate_version, ensure_tiny_coder, retire_version
from tests.factories import SYSTEM

pytestmark = pytest.mark.django_db


@pytest.fixture
def model_dir(tmp_path, settings):
    settings.SWITCHYARD_MODEL_ROOT = tmp_path
    (tmp_path / "tiny-coder").mkdir()
    return tmp_path / "tiny-coder"


def test_registers_a_published_qwen_coder_version(model_dir):
    version = ensure_tiny_coder(model_dir=model_dir, actor=SYSTEM)
    # Its tokenizer has Qwen2.5-Coder's FIM sentinels: the gateway renders that family's template for it.
    assert version.model.name == "tiny-coder" and version.model.family == "qwen-coder"
    assert version.status == VersionStatus.PUBLISHED and version.max_context == 1024
    assert version.artifact_uri == "tiny-coder"  # relative to the model root


def test_is_idempotent(model_dir):
    first = ensure_tiny_coder(model_dir=model_dir, actor=SYSTEM)
    assert ensure_tiny_coder(model_dir=model_dir, actor=SYSTEM) == first
    assert Model.objects.count() == 1 and ModelVersion.objects.count() == 1


def test_a_tiny_coder_registered_as_llama_is_moved_to_its_coder_family(model_dir):
    from audit.models import AuditEvent
    from models_registry.services import register_model

    register_model(name="tiny-coder", family="llama", actor=SYSTEM)
    version = ensure_tiny_coder(model_dir=model_dir, actor=SYSTEM)
    assert version.model.family == "qwen-coder"
    assert AuditEvent.objects.filter(action="model.update").count() == 1
    ensure_tiny_coder(model_dir=model_dir, actor=SYSTEM)
    assert AuditEvent.objects.filter(action="model.update").count() == 1  # nothing more to change


def test_a_retired_tiny_coder_gets_a_fresh_version(model_dir):
    first = ensure_tiny_coder(model_dir=model_dir, actor=SYSTEM)
    retire_version(deprecate_version(first, actor=SYSTEM), actor=SYSTEM)
    second = ensure_tiny_coder(model_dir=model_dir, actor=SYSTEM)
    assert second.pk != first.pk and second.version == "v2" and second.status == VersionStatus.PUBLISHED


def test_its_cpu_argv_is_small(model_dir):
    argv = render_vllm_argv(ensure_tiny_coder(model_dir=model_dir, actor=SYSTEM), model_path=str(model_dir),
                            served_model_name="tiny-coder", port=9000)
    assert argv[argv.index("--max-model-len") + 1] == "1024" and argv[argv.index("--max-num-seqs") + 1] == "8"
    assert argv[argv.index("--dtype") + 1] == "float32"


def test_a_model_dir_outside_the_root_is_refused(tmp_path, settings):
    settings.SWITCHYARD_MODEL_ROOT = tmp_path / "root"
    with pytest.raises(ValidationError) as caught:
        ensure_tiny_coder(model_dir=tmp_path / "elsewhere", actor=SYSTEM)
    assert "artifact_uri" in caught.value.message_dict
    assert not Model.objects.exists()  # nothing half-registered
