"""An engine that hangs after its first byte (the simulator's --hang-after-first-byte): the gateway's idle
timeout ends the request for the client with a clear error, meters it as a timeout (an engine error for a
rollout's gates, rollouts/selectors.py) and closes the engine's connection, which frees the engine's slot."""
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway_app.conftest import MODEL, wait_for
from tests.gateway_app.helpers import add_deployment, make_model_version, usage_rows

pytestmark = pytest.mark.django_db(transaction=True)
IDLE = 0.5


@pytest.fixture(scope="module")
def hung_engine(simulators):
    """Every request hangs after its first byte; 1 ms a token, so a whole answer would take milliseconds."""
    return simulators("--hang-after-first-byte", "1", "--prefill-ms-per-token", "0", "--decode-ms-per-token", "1")


@pytest.fixture
def server(gateway, alice, hung_engine):
    add_deployment(make_model_version(MODEL), tenant=None, name="hung", urls=[hung_engine.url])
    server = gateway(idle_timeout=IDLE, first_byte_timeout=20.0)
    server.wait_until_serving(alice.key.raw, MODEL)
    return server


def running(engine) -> float:
    text = httpx.get(engine.url + "/metrics", timeout=5).text
    family = next(f for f in text_string_to_metric_families(text) if f.name == "vllm:num_requests_running")
    return family.samples[0].value


def test_a_stream_that_stalls_after_its_first_token_ends_with_a_timeout_event_and_frees_the_engine(
        server, alice, hung_engine):
    began = time.monotonic()
    answer = server.post("/v1/completions", alice.key.raw,
                         {"model": MODEL, "prompt": "def f():", "max_tokens": 16, "stream": True})
    took = time.monotonic() - began
    events = [line[6:] for line in answer.text.splitlines() if line.startswith("data: ")]
    assert answer.status_code == 200 and '"text":' in events[0]  # the first token reached the client …
    assert '"code":"upstream_timeout"' in events[-2].replace(" ", "")  # … then the idle timeout's error event
    assert events[-1] == "[DONE]"
    assert took >= IDLE
    (row,) = wait_for(lambda: usage_rows(model_name=MODEL), timeout=10)
    assert (row.status_code, row.outcome) == (200, "timeout") and row.ttft_ms is not None
    assert wait_for(lambda: running(hung_engine) == 0, timeout=10)  # the gateway hung up: the engine aborted it


def test_a_whole_answer_that_stalls_after_its_first_byte_gets_a_504_and_frees_the_engine(server, alice, hung_engine):
    began = time.monotonic()
    answer = server.post("/v1/completions", alice.key.raw, {"model": MODEL, "prompt": "def f():", "max_tokens": 16})
    took = time.monotonic() - began
    assert answer.status_code == 504 and answer.json()["error"]["code"] == "upstream_timeout"
    assert took >= IDLE
    (row,) = wait_for(lambda: usage_rows(model_name=MODEL), timeout=10)
    assert (row.status_code, row.outcome) == (504, "timeout")
    assert wait_for(lambda: running(hung_engine) == 0, timeout=10)


def test_a_whole_answer_cut_mid_body_gets_a_502_not_a_crash(gateway, alice, scripted_engine):
    server = gateway(idle_timeout=5.0)
    server.wait_until_serving(alice.key.raw, MODEL)
    answer = server.post("/v1/completions", alice.key.raw, {"model": MODEL, "prompt": "cut-200"})
    assert answer.status_code == 502 and answer.json()["error"]["code"] == "upstream_error"
    assert scripted_engine.requests == {"cut-200": 1}  # after its headers, never retried elsewhere
    (row,) = wait_for(lambda: usage_rows(model_name=MODEL), timeout=10)
    assert (row.status_code, row.outcome) == (502, "upstream_error")
