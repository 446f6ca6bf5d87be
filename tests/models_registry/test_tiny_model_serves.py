"""The tiny model, built by `manage.py make_tiny_model`, really serves through vLLM with our rendered flags."""
import httpx
import pytest
from django.core.management import call_command

from models_registry.services import TINY_CODER
from tests.processes import ENGINE_PYTHON

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not ENGINE_PYTHON.exists(), reason=".venv-engine is absent (build it with `make engine`)"),
]


@pytest.fixture
def engine_url(tiny_vllm_url):
    """The session's tiny-coder vLLM (tests/conftest.py), started from `render_vllm_argv`'s flags."""
    return tiny_vllm_url


def test_make_tiny_model_is_idempotent(tiny_model_dir):
    before = {p.name: p.stat().st_mtime_ns for p in tiny_model_dir.iterdir()}
    call_command("make_tiny_model", str(tiny_model_dir), python=str(ENGINE_PYTHON))
    assert {p.name: p.stat().st_mtime_ns for p in tiny_model_dir.iterdir()} == before


def test_the_tiny_model_is_small_and_has_the_cpu_friendly_shape(tiny_model_dir):
    import json

    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] == 64 == config["head_dim"]
    assert config["num_key_value_heads"] == 1 and config["max_position_embeddings"] == 2048
    assert sum(p.stat().st_size for p in tiny_model_dir.iterdir()) < 5_000_000


def test_models_lists_the_served_name(engine_url):
    models = httpx.get(f"{engine_url}/v1/models", timeout=30).json()
    assert [m["id"] for m in models["data"]] == [TINY_CODER]
    assert models["data"][0]["max_model_len"] == 1024


def test_a_completion_returns_tokens_and_usage_with_prompt_details(engine_url):
    body = {"model": TINY_CODER, "prompt": "def fibonacci(n):", "max_tokens": 16, "priority": 1}
    response = httpx.post(f"{engine_url}/v1/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    assert usage["completion_tokens"] == 16 and usage["prompt_tokens"] > 0
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0  # --enable-prompt-tokens-details is on


def test_a_chat_completion_uses_the_chat_template(engine_url):
    body = {"model": TINY_CODER, "messages": [{"role": "user", "content": "Sort a list in Python."}], "max_tokens": 8}
    response = httpx.post(f"{engine_url}/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["message"]["role"] == "assistant" and response.json()["usage"]["completion_tokens"] > 0
