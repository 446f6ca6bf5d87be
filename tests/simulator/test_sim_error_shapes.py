"""The simulator's errors in vLLM 0.32's real shapes (vllm/entrypoints/serve/exception_handling/): the
`type`, `param` and wording vLLM gives each, its context-length rules, its admission 503 and the
error event that ends a failed stream (--fail-after-tokens, fault injection)."""
from __future__ import annotations

import json
import threading

import httpx
import pytest
from sim_helpers import CLIENT, MODEL


@pytest.fixture(scope="module")
def small(start_simulator) -> str:
    """A 64-token context; every generation fails at its 4th token."""
    return start_simulator("--max-model-len", "64", "--fail-after-tokens", "4", "--prefill-ms-per-token", "0.01",
                           "--decode-ms-per-token", "1")


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    payload = response.json()
    assert list(payload) == ["error"] and list(payload["error"]) == ["message", "type", "param", "code"]
    assert payload["error"]["code"] == status
    return payload["error"]


def post(base: str, **body) -> httpx.Response:
    return CLIENT.post(base + "/v1/completions", json={"model": MODEL, **body})


@pytest.mark.parametrize("body, status, err_type, param, message", [
    ({"model": "other", "prompt": "x"}, 404, "NotFoundError", "model",
     f"The model `other` does not exist. Valid aliases: {MODEL}."),
    ({"prompt": "abcd" * 80, "max_tokens": 1}, 400, "BadRequestError", "input_tokens",
     "This model's maximum context length is 64 tokens. However, your prompt contains 80 input tokens, which exceeds "
     "this limit even without any output tokens. Please reduce the length of the input prompt. "
     "(parameter=input_tokens, value=80)"),
    ({"prompt": "x", "max_tokens": 65}, 400, "BadRequestError", "max_tokens",
     "max_tokens=65 cannot be greater than max_model_len=64. Please request fewer output tokens. "
     "(parameter=max_tokens, value=65)"),
    ({"prompt": "x", "max_tokens": 0}, 400, "BadRequestError", "max_tokens",
     "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"),
    ({"prompt": "x", "seed": "s"}, 400, "Bad Request", "body.seed",
     "1 validation error:\n  {'type': 'int_type', 'loc': ('body', 'seed'), 'msg': 'Input should be a valid integer', "
     "'input': 's'}"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, 400, "BadRequestError", "stream_options",
     "Stream options can only be defined when `stream=True`."),
])
def test_each_refusal_has_vllms_type_param_and_wording(small, body, status, err_type, param, message):
    error = error_of(post(small, **body), status)
    assert (error["type"], error["param"], error["message"]) == (err_type, param, message)


def test_a_prompt_and_max_tokens_past_the_context_are_clamped_as_vllm_does(small):
    body = post(small, prompt="abcd" * 62, max_tokens=3, ignore_eos=True).json()
    assert body["usage"] == {**body["usage"], "prompt_tokens": 62, "completion_tokens": 2}
    assert body["choices"][0]["finish_reason"] == "length"


def test_a_failing_generation_is_vllms_500_without_a_stream(small):
    error = error_of(post(small, prompt="x", max_tokens=10, ignore_eos=True), 500)
    assert (error["type"], error["message"], error["param"]) == ("InternalServerError", "Internal server error", None)


def test_a_failing_stream_ends_with_vllms_error_event_then_done(small):
    response = post(small, prompt="x", max_tokens=10, ignore_eos=True, stream=True)
    blocks = [block for block in response.text.split("\n\n") if block]
    assert len(blocks) == 5 and blocks[-1] == "data: [DONE]"  # three tokens, the error, [DONE]
    assert all(json.loads(block[6:])["choices"] for block in blocks[:3])
    assert blocks[3] == ('data: {"error": {"message": "Internal server error", "type": "InternalServerError", '
                         '"param": null, "code": 500}}')


def test_a_generation_shorter_than_the_fault_succeeds(small):
    assert post(small, prompt="x", max_tokens=3, ignore_eos=True).status_code == 200


def test_past_max_num_queued_reqs_a_request_gets_vllms_503(start_simulator):
    base = start_simulator("--max-num-queued-reqs", "1", "--decode-ms-per-token", "50")
    streaming = threading.Event()

    def hold():
        with CLIENT.stream("POST", base + "/v1/completions", json={
                "model": MODEL, "prompt": "hold", "max_tokens": 100, "stream": True, "ignore_eos": True}) as held:
            for _ in held.iter_bytes():
                streaming.set()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert streaming.wait(10)
    error = error_of(post(base, prompt="x", max_tokens=1), 503)
    assert (error["type"], error["param"]) == ("Service Unavailable", None)
    assert error["message"].startswith("The engine is currently busy and cannot accept new requests.")
    holder.join(20)
