"""The tiny model, built by `manage.py make_tiny_model`, really serves through vLLM with our rendered flags."""
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.core.management import call_command

from models_registry.engine_args import render_vllm_argv
from models_registry.models import Model, ModelFamily, ModelVersion
from models_registry.services import TINY_CODER, TINY_CODER_ENGINE_ARGS

ENGINE_PYTHON = Path(settings.BASE_DIR) / ".venv-engine" / "bin" / "python"
# A deadline, not a timing assertion: start-up is ~45 s on an idle machine, minutes on a busy one.
START_DEADLINE_SECONDS = 900

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not ENGINE_PYTHON.exists(), reason=".venv-engine is absent (build it with `make engine`)"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    model_dir = tmp_path_factory.mktemp("models") / "tiny-coder"
    call_command("make_tiny_model", str(model_dir), python=str(ENGINE_PYTHON))
    return model_dir


@pytest.fixture(scope="module")
def engine_url(tiny_model_dir, tmp_path_factory):
    """A real vLLM process serving tiny-coder; the whole process group is stopped afterwards."""
    port = _free_port()
    version = ModelVersion(model=Model(name=TINY_CODER, family=ModelFamily.LLAMA), version="v1", dtype="float32",
                           artifact_uri=str(tiny_model_dir), engine_args=TINY_CODER_ENGINE_ARGS)
    argv = render_vllm_argv(version, model_path=str(tiny_model_dir), served_model_name=TINY_CODER, port=port)
    log = (tmp_path_factory.mktemp("logs") / "vllm.log").open("w")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    process = subprocess.Popen([str(ENGINE_PYTHON), "-m", "vllm.entrypoints.openai.api_server", *argv], env=env,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process, log.name)
        yield url
    finally:
        _stop(process)
        log.close()


def _wait_healthy(url: str, process: subprocess.Popen, log_path: str) -> None:
    deadline = time.monotonic() + START_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"vLLM exited with {process.returncode}:\n{Path(log_path).read_text()[-4000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
    pytest.fail(f"vLLM did not become healthy:\n{Path(log_path).read_text()[-4000:]}")


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the engine's process group (API server, engine core, worker), SIGKILL if it lingers."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


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
