"""Errors relayed from the engine reach the client in OpenAI's shape, whatever the engine sent:
vLLM's shapes, FastAPI's, plain text, HTML, empty, huge, invalid JSON, not UTF-8, slow; before a
stream's first byte and after it. The engine is a scripted stand-in (tests/gateway_app/scripted_engine.py)
sending those exact bytes; test_simulator_errors.py covers the same through the simulator."""
import json

import httpx
import openai
import pytest

from tests.gateway_app.conftest import MODEL, client_for, wait_for
from tests.gateway_app.helpers import add_deployment, make_model_version, usage_rows
from tests.gateway_app.scripted_engine import CONTEXT, ScriptedEngine

pytestmark = pytest.mark.django_db(transaction=True)
OPENAI_TYPES = {"invalid_request_error", "authentication_error", "permission_error", "not_found_error",
                "rate_limit_error", "server_error"}


@pytest.fixture
def scripted(gateway, alice, audit_head):
    engine = ScriptedEngine()
    add_deployment(make_model_version(MODEL), tenant=None, name="scripted", urls=[engine.url])
    server = gateway(eject_after_failures=1000)  # every shape on the one engine, however many 5xx
    server.wait_until_serving(alice.key.raw, MODEL)
    yield server, engine
    engine.stop()


def ask(server, alice, name: str, *, stream: bool = False) -> httpx.Response:
    return server.post("/v1/completions", alice.key.raw, {"model": MODEL, "prompt": name, "stream": stream})


def openai_error(response: httpx.Response) -> dict:
    """The response's error, checked to be exactly OpenAI's shape."""
    assert response.headers["content-type"] == "application/json" and response.headers["x-request-id"]
    payload = response.json()
    assert list(payload) == ["error"] and set(payload["error"]) == {"message", "type", "param", "code"}
    error = payload["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] in OPENAI_TYPES and isinstance(error["code"], str)
    assert error["param"] is None or isinstance(error["param"], str)
    return error


GENERIC = object()  # the gateway's own wording: the engine's body had no usable message
NOT_AN_ANSWER = object()  # a 200 that is no answer at all (a proxy's sign-in page): the gateway's wording


@pytest.mark.parametrize("name, status, code, message, param", [
    ("vllm-context", 400, "context_length_exceeded", CONTEXT, "input_tokens"),
    ("vllm-validation", 400, "invalid_request", "1 validation error:\n  {'type': 'int_parsing', 'loc': ('body', "
                                                "'max_tokens'), 'msg': 'Input should be a valid integer', "
                                                "'input': 'x'}", "max_tokens"),
    ("vllm-not-found", 502, "upstream_error", "The model `sim-coder` does not exist. Valid aliases: other.", None),
    ("vllm-overloaded", 503, "engine_overloaded", "The engine is currently busy and cannot accept new requests. "
                                                  "Please try again later or on a different instance.", None),
    ("vllm-internal", 502, "upstream_error", "Internal server error", None),
    ("vllm-old-shape", 400, "invalid_request", "best_of must be 1 when using greedy sampling.", None),
    ("fastapi-validation", 422, "invalid_request", "max_tokens: Input should be a valid integer", None),
    ("fastapi-not-found", 502, "upstream_error", "Not Found", None),
    ("plain-500", 502, "upstream_error", GENERIC, None),
    ("html-502", 502, "upstream_error", GENERIC, None),
    ("traceback-500", 502, "upstream_error", "boom", None),
    ("empty-400", 400, "invalid_request", GENERIC, None),
    ("huge-400", 400, "invalid_request", GENERIC, None),
    ("invalid-json-400", 400, "invalid_request", GENERIC, None),
    ("non-utf8-400", 400, "invalid_request", GENERIC, None),
    ("nested-400", 400, "invalid_request", GENERIC, None),
    ("surrogate-400", 400, "invalid_request", "bad ? value", None),
    ("array-400", 400, "invalid_request", GENERIC, None),
    ("chunked-400", 400, "invalid_request", "in two chunks", None),
    ("slow-400", 400, "invalid_request", GENERIC, None),
    ("redirect-307", 502, "upstream_error", GENERIC, None),
    ("html-200", 502, "upstream_error", NOT_AN_ANSWER, None),
    ("empty-200", 502, "upstream_error", NOT_AN_ANSWER, None),
])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream-before-first-byte"])
def test_an_engine_error_reaches_the_client_in_openais_shape(scripted, alice, name, status, code, message, param,
                                                             stream):
    server, _ = scripted
    response = ask(server, alice, name, stream=stream)
    assert response.status_code == status, response.text
    error = openai_error(response)
    assert (error["code"], error["param"]) == (code, param)
    if message is GENERIC:
        assert error["message"].startswith("The model server")
    elif message is NOT_AN_ANSWER:
        assert error["message"] in ("The model server's answer was not a JSON object.",
                                    "The model server's answer was not an event stream.")
    else:
        assert error["message"] == message
    assert "Traceback" not in response.text and "/opt/vllm" not in response.text


def test_a_long_engine_message_is_cut_and_a_busy_engine_says_when_to_retry(scripted, alice):
    server, _ = scripted
    error = openai_error(ask(server, alice, "long-message-400"))
    assert error["message"] == "y" * 2000 + "…"
    busy = ask(server, alice, "vllm-overloaded")
    assert busy.status_code == 503 and busy.headers["retry-after"] == "1"


def test_official_clients_raise_their_usual_exceptions_with_the_gateways_code(scripted, alice):
    server, _ = scripted
    client = client_for(server, alice.key.raw)
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL, prompt="vllm-context")
    assert caught.value.code == "context_length_exceeded" and caught.value.param == "input_tokens"
    with pytest.raises(openai.InternalServerError) as caught:
        client.completions.create(model=MODEL, prompt="html-502")
    assert caught.value.code == "upstream_error" and caught.value.status_code == 502


def events_of(response: httpx.Response) -> list:
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    blocks = [block for block in response.text.split("\n\n") if block]
    assert blocks[-1] == "data: [DONE]" and blocks.count("data: [DONE]") == 1
    return [json.loads(block.removeprefix("data: ")) for block in blocks[:-1]]


@pytest.mark.parametrize("name, tokens, status_type, code, message", [
    ("stream-fails", 2, "server_error", "upstream_error", "Internal server error"),
    ("stream-fails-in-one-read", 1, "server_error", "upstream_error", "Internal server error"),
    ("stream-fails-old-shape", 1, "server_error", "engine_overloaded", "Request failed; please retry"),
    ("stream-client-error", 1, "invalid_request_error", "invalid_request", "bad tool call"),
])
def test_a_stream_the_engine_ends_with_an_error_event_ends_with_an_openai_shaped_one(
        scripted, alice, name, tokens, status_type, code, message):
    server, _ = scripted
    events = events_of(ask(server, alice, name, stream=True))
    assert len(events) == tokens + 1 and all("choices" in event for event in events[:-1])
    assert events[-1] == {"error": {"message": message, "type": status_type, "param": None, "code": code}}


def test_a_stream_failing_mid_way_is_metered_as_the_engines_failure_or_the_clients(scripted, alice):
    server, _ = scripted
    ids = [ask(server, alice, name, stream=True).headers["x-request-id"] for name in ("stream-fails",
                                                                                     "stream-client-error")]
    rows = wait_for(lambda: (found := usage_rows(request_id__in=ids)) and len(found) == 2 and found, timeout=5)
    outcomes = {row.request_id: (row.status_code, row.outcome) for row in rows}
    assert [outcomes[rid] for rid in ids] == [(200, "upstream_error"), (200, "client_error")]


def test_token_text_that_mentions_errors_is_relayed_as_it_is(scripted, alice):
    server, _ = scripted
    response = ask(server, alice, "stream-text-about-errors", stream=True)
    events = events_of(response)
    assert events[0]["choices"][0]["text"] == 'the "error" key'
    assert not any("error" in event for event in events)
