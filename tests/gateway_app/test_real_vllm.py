"""The official openai client through the gateway in front of a real CPU vLLM serving tiny-coder
(the session's engine, tests/conftest.py `tiny_vllm_url`)."""
import pytest

from tests.gateway_app.conftest import client_for, wait_for
from tests.gateway_app.helpers import add_deployment, make_model_version, usage_rows
from tests.processes import ENGINE_PYTHON

MODEL = "tiny-coder"

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not ENGINE_PYTHON.exists(), reason=".venv-engine is absent (build it with `make engine`)"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def tiny(gateway, alice, tiny_vllm_url):
    add_deployment(make_model_version(MODEL), tenant=None, name="tiny-shared", urls=[tiny_vllm_url],
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
