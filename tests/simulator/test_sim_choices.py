"""Several sequences per request, and usage, as vLLM reports them: `n` choices, completions batches,
streams with usage on every chunk, and the worst-case token count of non-ASCII text."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from sim_helpers import MODEL, leave_mid_request

from simulator.app import build_app
from simulator.config import SimulatorConfig
from simulator.tokenizer import tokenize


def call(path: str, body: dict, **config) -> httpx.Response:
    """One request to an in-process zero-latency simulator."""
    async def scenario() -> httpx.Response:
        app = build_app(SimulatorConfig(served_model_name=MODEL, decode_ms_per_token=0, prefill_ms_per_token=0,
                                        **config))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            response = await client.post(path, json={"model": MODEL, **body})
        await app.engine.stop()
        return response

    return asyncio.run(scenario())


def events(response: httpx.Response) -> list[dict]:
    assert response.text.endswith("data: [DONE]\n\n")
    return [json.loads(line[6:]) for line in response.text.split("\n\n") if line.startswith("data: {")]


CHAT = {"messages": [{"role": "user", "content": "write a function"}]}
CHAT_PROMPT = len(tokenize("<|user|>\nwrite a function\n<|assistant|>\n"))


def test_n_choices_are_generated_and_counted_like_vllm():
    body = call("/v1/chat/completions", {**CHAT, "n": 3, "max_tokens": 5}).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert len({c["message"]["content"] for c in body["choices"]}) == 3  # each choice samples on its own
    # The prompt once, every choice's tokens.
    assert body["usage"]["prompt_tokens"] == CHAT_PROMPT and body["usage"]["completion_tokens"] == 15


def test_each_prompt_of_a_batch_gets_n_choices_in_vllms_order():
    body = call("/v1/completions", {"prompt": ["def add(a, b):", "x = 1"], "n": 2, "max_tokens": 4}).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert body["usage"]["prompt_tokens"] == len(tokenize("def add(a, b):")) + len(tokenize("x = 1"))
    assert body["usage"]["completion_tokens"] == 16
    ids = call("/v1/completions", {"prompt": [[5, 6, 7], [8]], "max_tokens": 2}).json()
    assert ids["usage"]["prompt_tokens"] == 4 and ids["usage"]["completion_tokens"] == 4


def test_chat_prefers_max_completion_tokens_as_vllm_does():
    body = call("/v1/chat/completions", {**CHAT, "max_tokens": 2, "max_completion_tokens": 6}).json()
    assert body["usage"]["completion_tokens"] == 6


@pytest.mark.parametrize("path, body", [("/v1/chat/completions", CHAT), ("/v1/completions", {"prompt": ["ab", "cd"]})])
def test_a_stream_of_several_choices_carries_each_choices_running_usage(path, body):
    options = {"include_usage": True, "continuous_usage_stats": True}
    chunks = events(call(path, {**body, "n": 2, "max_tokens": 3, "stream": True, "stream_options": options}))
    final = chunks[-1]
    assert final["choices"] == []
    running = {}
    for chunk in chunks[:-1]:
        (choice,) = chunk["choices"]
        used = chunk["usage"]["completion_tokens"]
        assert used >= running.get(choice["index"], 0)  # per choice, counted so far (vLLM's continuous stats)
        running[choice["index"]] = used
    sequences = 2 if path.endswith("chat/completions") else 4
    assert sorted(running) == list(range(sequences)) and set(running.values()) == {3}
    assert final["usage"]["completion_tokens"] == 3 * sequences == sum(running.values())


def test_continuous_usage_needs_include_usage_as_in_vllm():
    chunks = events(call("/v1/completions", {"prompt": "ab", "max_tokens": 2, "stream": True,
                                             "stream_options": {"continuous_usage_stats": True}}))
    assert all("usage" not in chunk for chunk in chunks) and len(chunks) == 2


def test_a_single_sequence_stream_with_continuous_usage_counts_up():
    options = {"include_usage": True, "continuous_usage_stats": True}
    chunks = events(call("/v1/completions",
                         {"prompt": "ab", "max_tokens": 3, "stream": True, "stream_options": options}))
    assert [c["usage"]["completion_tokens"] for c in chunks] == [1, 2, 3, 3]
    assert chunks[2]["choices"][0]["finish_reason"] == "length"


def test_beam_search_cannot_stream_and_best_of_is_ignored_as_in_vllm():
    refused = call("/v1/completions", {"prompt": "ab", "n": 2, "use_beam_search": True, "stream": True})
    assert refused.status_code == 400 and "beam search" in refused.json()["error"]["message"]
    body = call("/v1/completions", {"prompt": "ab", "n": 2, "best_of": 5, "max_tokens": 2}).json()
    assert len(body["choices"]) == 2 and body["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize("prompt", [[], [[]], ["ok", ""], [1, "a"], ["a", [1]], [True]])
def test_bad_prompt_batches_are_400(prompt):
    assert call("/v1/completions", {"prompt": prompt}).status_code == 400


def test_every_prompt_of_a_batch_must_fit_the_context():
    response = call("/v1/completions", {"prompt": ["ab", "x" * 400], "max_tokens": 10}, max_model_len=100)
    assert response.status_code == 400 and "maximum context length" in response.json()["error"]["message"]


def test_non_ascii_text_costs_a_token_per_utf8_byte():
    assert tokenize("abcdefghij") == ["abcd", "efgh", "ij"]
    assert len(tokenize("😀" * 10)) == 40 and len(tokenize("中文")) == 6
    assert len(tokenize("e\u0301")) == 3  # e, then a combining acute accent of 2 bytes
    assert len(tokenize("\ud800")) == 3  # a lone surrogate as vLLM would receive it (surrogatepass)
    assert tokenize("ab😀cd")[:2] == ["ab", "😀"] and tokenize("ab😀cd")[-1] == "cd"


def test_a_client_leaving_aborts_every_sequence():
    async def scenario() -> int:
        app = build_app(SimulatorConfig(served_model_name=MODEL, decode_ms_per_token=50, prefill_ms_per_token=0))
        body = json.dumps({"prompt": ["a", "b"], "n": 2, "max_tokens": 1000}).encode()
        await leave_mid_request(app, "/v1/completions", body, after=0.1)
        aborted = app.engine.stats.finished["abort"]
        await app.engine.stop()
        return aborted

    assert asyncio.run(scenario()) == 4
