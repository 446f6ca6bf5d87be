"""vLLM's real error shapes, produced by real simulator processes (simulator/protocol.py follows vLLM 0.32),
reach gateway clients in OpenAI's shape: a refused request, an overloaded engine, a stream that fails."""
import json
import threading

import httpx
import openai
import pytest

from tests.gateway_app.conftest import MODEL, client_for, wait_for
from tests.gateway_app.helpers import add_deployment, make_model_version, usage_rows

pytestmark = pytest.mark.django_db(transaction=True)


def serve(gateway, alice, urls, name):
    add_deployment(make_model_version(MODEL), tenant=None, name=name, urls=urls)
    server = gateway(eject_after_failures=1000)
    server.wait_until_serving(alice.key.raw, MODEL)
    return server


@pytest.fixture(scope="session")
def failing_sim(simulators):
    """A 64-token context; every generation fails at its 3rd token."""
    return simulators("--max-model-len", "64", "--fail-after-tokens", "3", "--decode-ms-per-token", "1",
                      "--prefill-ms-per-token", "0.01")


def test_vllms_refusals_become_openai_errors_naming_the_field(gateway, alice, failing_sim):
    server = serve(gateway, alice, [failing_sim.url], "failing")
    client = client_for(server, alice.key.raw)
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL, prompt="abcd" * 80, max_tokens=1)
    assert (caught.value.code, caught.value.param) == ("context_length_exceeded", "input_tokens")
    assert caught.value.body["message"].startswith("This model's maximum context length is 64 tokens.")
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL, prompt="x", max_tokens=1, seed="s")  # pydantic's shape on vLLM
    assert (caught.value.code, caught.value.param, caught.value.type) == ("invalid_request", "seed",
                                                                          "invalid_request_error")


def test_a_generation_failing_in_the_engine_is_an_openai_error_before_and_after_the_first_byte(
        gateway, alice, failing_sim):
    server = serve(gateway, alice, [failing_sim.url], "failing")
    body = {"model": MODEL, "prompt": "x", "max_tokens": 10, "ignore_eos": True}
    whole = server.post("/v1/completions", alice.key.raw, body)
    assert whole.status_code == 502 and whole.json() == {"error": {
        "message": "Internal server error", "type": "server_error", "param": None, "code": "upstream_error"}}
    streamed = server.post("/v1/completions", alice.key.raw, {**body, "stream": True})
    blocks = [block for block in streamed.text.split("\n\n") if block]
    assert streamed.status_code == 200 and blocks[-1] == "data: [DONE]" and len(blocks) == 4
    assert [json.loads(block[6:])["choices"][0]["text"] != "" for block in blocks[:2]] == [True, True]
    assert json.loads(blocks[2][6:]) == {"error": {"message": "Internal server error", "type": "server_error",
                                                   "param": None, "code": "upstream_error"}}
    rid = streamed.headers["x-request-id"]
    row = wait_for(lambda: (found := usage_rows(request_id=rid)) and found[0], timeout=5)
    assert (row.status_code, row.outcome, row.completion_tokens) == (200, "upstream_error", 2)


def test_an_engine_past_its_queue_limit_is_a_503_to_retry(gateway, alice, simulators):
    busy = simulators("--max-num-queued-reqs", "1", "--decode-ms-per-token", "50")
    server = serve(gateway, alice, [busy.url], "busy")
    streaming = threading.Event()

    def hold():
        with httpx.stream("POST", server.url + "/v1/completions", timeout=30,
                          headers={"authorization": f"Bearer {alice.key.raw}"},
                          json={"model": MODEL, "prompt": "hold", "max_tokens": 60, "stream": True,
                                "ignore_eos": True}) as held:
            for _ in held.iter_bytes():
                streaming.set()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert streaming.wait(10)
    refused = server.post("/v1/completions", alice.key.raw, {"model": MODEL, "prompt": "x", "max_tokens": 1})
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "engine_overloaded")
    assert error["message"].startswith("The engine is currently busy")
    holder.join(20)
