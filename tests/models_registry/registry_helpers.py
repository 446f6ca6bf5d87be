"""Small builders for registry tests, through the real services (so audit rows are written)."""
from models_registry.services import create_version, register_model
from tests.factories import SYSTEM

HF_URI = "hf://Qwen/Qwen2.5-Coder-7B-Instruct@0eb6b1ed2d0c4306bc637d09ecef51e59d3dfe05"


def make_model(name: str = "qwen-coder-7b", family: str = "qwen-coder"):
    return register_model(name=name, family=family, actor=SYSTEM)


def make_version(model=None, label: str = "v1", **fields):
    fields.setdefault("artifact_uri", HF_URI)
    return create_version(model=model or make_model(), version=label, actor=SYSTEM, **fields)
