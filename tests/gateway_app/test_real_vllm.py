"""The official openai client through the gateway in front of a real CPU vLLM serving tiny-coder."""
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.core.management import call_command

from tests.gateway_app.conftest import client_for, wait_for
from tests.gateway_app.helpers import add_deployment, free_port, make_model_version, usage_rows

ENGINE_PYTHON = Path(settings.BASE_DIR) / ".venv-engine" / "bin" / "python"
START_DEADLINE_SECONDS = 900  # a deadline, not a timing assertion: ~45 s idle, minutes when busy
MODEL = "tiny-coder"

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not ENGINE_PYTHON.exists(), reason=".venv-engine is absent (build it with `make engine`)"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory):
    """A real vLLM process (the flags from the brief); its process group is stopped afterwards."""
    model_dir = tmp_path_factory.mktemp("models") / MODEL
    call_command("make_tiny_model", str(model_dir), python=str(ENGINE_PYTHON))
    port = free_port()
    log = (tmp_path_factory.mktemp("logs") / "vllm.log").open("w")
    argv = [str(ENGINE_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--served-model-name", MODEL, "--port", str(port), "--max-model-len", "1024", "--dtype", "float32",
            "--enable-prefix-caching", "--enable-prompt-tokens-details"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process, log.name)
        yield url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        log.close()


def _wait_healthy(url: str, process, log_path: str) -> None:
    deadline = time.monotonic() + START_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM exited; see {log_path}:\n{Path(log_path).read_text()[-3000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
    raise RuntimeError(f"vLLM did not become healthy; see {log_path}")


@pytest.fixture
def tiny(gateway, alice, vllm_url):
    add_deployment(make_model_version(MODEL), tenant=None, name="tiny-shared", urls=[vllm_url],
                   runtime_backend="local")
    server = gateway()
    server.wait_until_serving(alice.key.raw, MODEL)
    return client_for(server, alice.key.raw, timeout=120)


def test_completion_chat_and_stream_through_the_gateway(tiny):
    completion = tiny.completions.create(model=MODEL, prompt="def add(a, b):", max_tokens=8)
    assert completion.usage.completion_tokens > 0 and completion.usage.prompt_tokens > 0
    chat = tiny.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8)
    assert chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens > 0
    chunks = list(tiny.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "go"}],
                                               max_tokens=8, stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    streamed = wait_for(lambda: usage_rows(streamed=True), timeout=5)
    assert streamed and streamed[0].completion_tokens == chunks[-1].usage.completion_tokens


def test_shared_pools_get_the_tenant_cache_salt_and_repeat_prompts_hit_the_prefix_cache(tiny):
    prompt = "# shared header\n" * 120
    tiny.completions.create(model=MODEL, prompt=prompt, max_tokens=2)
    again = tiny.completions.create(model=MODEL, prompt=prompt, max_tokens=2)
    assert again.usage.prompt_tokens_details.cached_tokens > 0  # same tenant, same salt: a hit
