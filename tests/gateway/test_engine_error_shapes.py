"""Re-shaping an engine's errors (gateway/pipeline/engine_errors.py) and finding them in a stream
(gateway/pipeline/sse.py), block by block, without a running engine."""
import json

import pytest

from gateway.pipeline.engine_errors import MAX_ERROR_BODY, engine_error
from gateway.pipeline.sse import SseRelay

TOKEN = (b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,'
         b'"text":"x","logprobs":null,"finish_reason":null}]}\n\n')
VLLM_ERROR = b'data: {"error": {"message": "Internal server error", "type": "InternalServerError", "param": null, ' \
             b'"code": 500}}\n\n'
DONE = b"data: [DONE]\n\n"
SHAPED = b'data: {"error":{"message":"Internal server error","type":"server_error","param":null,' \
         b'"code":"upstream_error"}}\n\ndata: [DONE]\n\n'


@pytest.mark.parametrize("blocks", [
    [TOKEN + VLLM_ERROR, DONE],  # the error the last event of a block, [DONE] in the next
    [TOKEN, VLLM_ERROR, DONE],  # each in its own read
    [TOKEN, VLLM_ERROR + DONE],  # the error and [DONE] together
    [TOKEN + VLLM_ERROR[:30], VLLM_ERROR[30:] + DONE],  # the error split across reads
])
@pytest.mark.parametrize("token_cap", [None, 100], ids=["uncapped", "capped"])  # capped: every event looked at
def test_an_error_event_is_re_shaped_and_ends_the_stream_however_the_reads_fall(blocks, token_cap):
    relay = SseRelay(strip_usage=True, token_cap=token_cap)
    out = b"".join(relay.feed(block) for block in blocks)
    assert out == TOKEN + SHAPED
    assert relay.finished and relay.engine_error.status == 502 and relay.streamed_tokens == 1


def test_token_events_pass_through_untouched_and_counted():
    relay = SseRelay(strip_usage=True)
    assert relay.feed(TOKEN * 3) == TOKEN * 3
    assert relay.feed(DONE) == DONE
    assert relay.streamed_tokens == 3 and relay.engine_error is None


@pytest.mark.parametrize("status, body, expected", [
    (400, b'{"error": {"message": "m", "type": "BadRequestError", "param": "body.temperature", "code": 400}}',
     (400, "invalid_request", "m", "temperature")),
    (400, b'{"error": {"message": "m", "param": "not a field name", "code": 400}}',
     (400, "invalid_request", "m", None)),
    (400, b'{"object": "error", "message": "old", "type": "BadRequestError", "param": null, "code": 400}',
     (400, "invalid_request", "old", None)),
    (400, b'{"error": "just a string"}', (400, "invalid_request", "just a string", None)),
    (400, b'{"error": {"message": 42}}', (400, "invalid_request", "The model server refused the request.", None)),
    (422, b'{"detail": [{"loc": ["body", "n"], "msg": "bad"}, {"loc": ["body"], "msg": "worse"}]}',
     (422, "invalid_request", "n: bad; worse", None)),
    (413, b"", (413, "request_too_large", "The model server found the request too large.", None)),
    (429, b"slow down", (503, "engine_overloaded", "The model server is busy; please retry.", None)),
    (401, b'{"error": {"message": "Unauthorized"}}', (502, "upstream_error", "Unauthorized", None)),
    (504, b"<html>", (504, "upstream_timeout", "The model server did not answer in time.", None)),
    (307, b"", (502, "upstream_error", "The model server answered 307 Temporary Redirect.", None)),
    (599, b"", (502, "upstream_error", "The model server answered 599.", None)),
])
def test_each_engine_shape_maps_to_a_status_code_message_and_param(status, body, expected):
    error = engine_error(status, body)
    assert (error.status, error.code, error.message, error.param) == expected
    payload = json.loads(error.body())
    assert set(payload["error"]) == {"message", "type", "param", "code"}


def test_messages_lose_stack_traces_and_lone_surrogates_and_are_bounded():
    traced = json.dumps({"error": {"message": "failed\nTraceback (most recent call last):\n  File \"/x.py\", line 1"}})
    assert engine_error(500, traced.encode()).message == "failed"
    framed = json.dumps({"error": {"message": "bad input\n  File \"/srv/app.py\", line 9, in run"}})
    assert engine_error(400, framed.encode()).message == "bad input"
    assert engine_error(400, b'{"error": {"message": "a\\udc80b"}}').message == "a?b"
    assert engine_error(400, json.dumps({"error": {"message": "z" * 5000}}).encode()).message == "z" * 2000 + "…"
    too_big = b'{"error": {"message": "' + b"q" * MAX_ERROR_BODY + b'"}}'
    assert engine_error(400, too_big).message == "The model server refused the request."
    assert engine_error(400, b"[" * 100_000).message == "The model server refused the request."
