"""Fill-in-the-middle reaches a real CPU vLLM token-exact: the official openai client sends `suffix` through
the gateway to tiny-coder (the session's engine, tests/conftest.py `tiny_vllm_url`), whose tokenizer has
Qwen2.5-Coder's FIM sentinels as special tokens; the prompt token ids the engine reports are the
tokenization of the rendered prompt, each sentinel one token."""
import json
import subprocess

import pytest

from tests.gateway_app.conftest import client_for, wait_for
from tests.gateway_app.helpers import add_deployment, make_model_version, usage_rows
from tests.processes import ENGINE_PYTHON

MODEL = "tiny-coder"
SENTINELS = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"]
PREFIX = "def mean(values):\n    total = "
SUFFIX = "\n    return total / len(values)\n"
RENDERED = f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>"  # Qwen2.5-Coder's documented format

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not ENGINE_PYTHON.exists(), reason=".venv-engine is absent (build it with `make engine`)"),
    pytest.mark.django_db(transaction=True),
]

# The Hugging Face tokenizer of the model directory, as vLLM loads it (completions add special tokens).
TOKENIZE = """
import json, sys
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
print(json.dumps({"ids": tokenizer(sys.argv[2])["input_ids"],
                  "sentinels": tokenizer.convert_tokens_to_ids(json.loads(sys.argv[3]))}))
"""


def tokenized(model_dir, text: str) -> dict:
    out = subprocess.run([str(ENGINE_PYTHON), "-c", TOKENIZE, str(model_dir), text, json.dumps(SENTINELS)],
                         capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def tiny(gateway, alice, tiny_vllm_url):
    add_deployment(make_model_version(MODEL, family="qwen-coder"), tenant=None, name="tiny-fim",
                   urls=[tiny_vllm_url], runtime_backend="local")
    server = gateway()
    server.wait_until_serving(alice.key.raw, MODEL)
    return client_for(server, alice.key.raw, timeout=120)


def test_the_engine_tokenizes_the_rendered_prompt_with_each_sentinel_as_one_token(tiny, tiny_model_dir):
    expected = tokenized(tiny_model_dir, RENDERED)
    ids, (prefix_id, suffix_id, middle_id) = expected["ids"], expected["sentinels"]
    assert len({prefix_id, suffix_id, middle_id}) == 3  # three distinct single tokens of the vocabulary
    completion = tiny.completions.create(model=MODEL, prompt=PREFIX, suffix=SUFFIX, max_tokens=4, temperature=0,
                                         extra_body={"return_token_ids": True, "prompt_logprobs": 0})
    choice = completion.choices[0]
    engine_ids = choice.model_extra["prompt_token_ids"]
    assert engine_ids == ids  # token-exact
    assert [engine_ids.count(i) for i in (prefix_id, suffix_id, middle_id)] == [1, 1, 1]
    assert engine_ids[0] == prefix_id and engine_ids[-1] == middle_id
    assert completion.usage.prompt_tokens == len(ids)
    # prompt_logprobs decode each prompt token on its own: the sentinels come back whole.
    decoded = [next(iter(entry.values()))["decoded_token"] for entry in choice.model_extra["prompt_logprobs"][1:]]
    assert SENTINELS[1] in decoded and decoded[-1] == SENTINELS[2]
    [row] = wait_for(lambda: usage_rows(model_name=MODEL), timeout=5)
    assert row.prompt_tokens == len(ids)


def test_a_streamed_fim_request_through_the_official_client(tiny, tiny_model_dir):
    ids = tokenized(tiny_model_dir, RENDERED)["ids"]
    chunks = list(tiny.completions.create(model=MODEL, prompt=PREFIX, suffix=SUFFIX, max_tokens=4, stream=True,
                                          stream_options={"include_usage": True},
                                          extra_body={"return_token_ids": True}))
    first = next(c for c in chunks if c.choices)
    assert first.choices[0].model_extra["prompt_token_ids"] == ids
    assert chunks[-1].usage.prompt_tokens == len(ids) and chunks[-1].usage.completion_tokens > 0
