"""Which artifact URIs the registry accepts: a wrong one would let the fleet read host files or reach internal hosts."""
import pytest
from django.core.exceptions import ValidationError

from models_registry.artifacts import local_model_path, validate_artifact_uri
from models_registry.models import Model, ModelVersion


@pytest.fixture
def model_root(tmp_path, settings):
    root = tmp_path / "models"
    (root / "tiny-coder").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (root / "escape").symlink_to(tmp_path / "outside")
    settings.SWITCHYARD_MODEL_ROOT = root
    return root


ACCEPTED = [
    "tiny-coder",
    "tiny-coder/",
    "hf://deepseek-ai/deepseek-coder-6.7b-instruct@e5d64addd26a6a1db0f9b863abf6ee3141936807",
    "hf://Qwen/Qwen2.5-Coder-7B-Instruct@main",
    "s3://models-prod/qwen/7b/v3/",
    "s3://my.bucket-1/weights.safetensors",
    "https://models.example.com/qwen.tar",
    "https://93.184.216.34/weights.tar",
    "https://[2606:4700:4700::1111]/weights.tar",
]

REFUSED = [
    ("", "required"),
    ("../etc", "outside"),
    ("tiny-coder/../../etc", "outside"),
    ("/etc/passwd", "outside"),
    ("file:///etc/passwd", "outside"),
    ("file://otherhost/models/x", "another host"),
    ("escape", "outside"),  # a symlink inside the root pointing out of it
    ("hf://Qwen/Qwen2.5-Coder-7B", "revision is required"),
    ("hf://Qwen2.5-Coder-7B@main", "hf://org/repo@revision"),
    ("hf://Qwen/Qwen2.5-Coder-7B@", "revision"),
    ("s3://", "s3://bucket/key"),
    ("s3://bucket-only", "s3://bucket/key"),
    ("s3://Bad_Bucket/key", "s3://bucket/key"),
    ("s3://bucket/a/../../b", "'..'"),
    ("http://models.example.com/x", "Unsupported scheme 'http:'"),
    ("ftp://models.example.com/x", "Unsupported scheme"),
    ("gs://bucket/x", "Unsupported scheme"),
    ("https://localhost/x", "not allowed"),
    ("https://LOCALHOST./x", "not allowed"),
    ("https://api.localhost/x", "not allowed"),
    ("https://127.0.0.1/x", "not allowed"),
    ("https://127.1/x", "not allowed"),
    ("https://2130706433/x", "not allowed"),
    ("https://0x7f000001/x", "not allowed"),
    ("https://10.1.2.3/x", "not allowed"),
    ("https://172.16.0.1/x", "not allowed"),
    ("https://192.168.1.10/x", "not allowed"),
    ("https://169.254.169.254/latest/meta-data", "not allowed"),
    ("https://0.0.0.0/x", "not allowed"),
    ("https://[::1]/x", "not allowed"),
    ("https://[fe80::1]/x", "not allowed"),
    ("https://[fd00::1]/x", "not allowed"),
    ("https://[::ffff:127.0.0.1]/x", "not allowed"),
    ("https://metadata.google.internal/x", "not allowed"),
    ("https://user:secret@models.example.com/x", "Credentials"),
]


@pytest.mark.parametrize("uri", ACCEPTED)
def test_accepted_uris(model_root, uri):
    assert validate_artifact_uri(f"  {uri} ") == uri


@pytest.mark.parametrize("uri,reason", REFUSED)
def test_refused_uris_name_the_field_and_the_reason(model_root, uri, reason):
    with pytest.raises(ValidationError) as caught:
        validate_artifact_uri(uri)
    assert reason in " ".join(caught.value.message_dict["artifact_uri"])


def test_absolute_and_file_uris_inside_the_root_are_accepted(model_root):
    assert validate_artifact_uri(str(model_root / "tiny-coder"))
    assert validate_artifact_uri(f"file://{model_root / 'tiny-coder'}")


def test_the_root_itself_is_not_a_model(model_root):
    with pytest.raises(ValidationError):
        validate_artifact_uri(str(model_root))


def test_local_model_path_resolves_under_the_root(model_root):
    version = ModelVersion(model=Model(name="m"), version="v1", artifact_uri="tiny-coder")
    assert local_model_path(version) == (model_root / "tiny-coder").resolve()


def test_local_model_path_rechecks_links_created_after_registration(model_root, tmp_path):
    version = ModelVersion(model=Model(name="m"), version="v1", artifact_uri="later")
    validate_artifact_uri(version.artifact_uri)  # fine at registration: nothing there yet
    (model_root / "later").symlink_to(tmp_path / "outside")
    with pytest.raises(ValidationError, match="outside"):
        local_model_path(version)


def test_local_model_path_refuses_remote_and_missing_artifacts(model_root):
    with pytest.raises(ValidationError, match="not a local artifact"):
        local_model_path(ModelVersion(model=Model(name="m"), version="v1", artifact_uri="s3://bucket/key"))
    with pytest.raises(ValidationError, match="does not exist"):
        local_model_path(ModelVersion(model=Model(name="m"), version="v1", artifact_uri="not-built-yet"))
