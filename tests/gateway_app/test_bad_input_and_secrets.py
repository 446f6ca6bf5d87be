"""Through the running gateway: bodies that were plain-text 500s are OpenAI-shaped 400s, and text
that is not forwarded (an unknown model name, a refused role) is neither stored nor echoed raw.

What reached the engine is read from an `EchoEngine` (it keeps the bodies it received).
"""
from __future__ import annotations

import json

import pytest

from tenants.models import RedactionMode
from tenants.services import update_tenant
from tests.factories import SYSTEM
from tests.gateway_app.conftest import MODEL, wait_for
from tests.gateway_app.helpers import usage_rows

pytestmark = pytest.mark.django_db(transaction=True)
AWS_KEY = "AKIAQ3EGRTX5ZBN7W4KD"
SY_KEY = "sy_live_Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5hJ"


@pytest.fixture
def server(gateway, alice, echo):
    running = gateway()
    running.wait_until_serving(alice.key.raw, MODEL)
    return running


def nested(depth: int) -> bytes:
    return b'{"model": "%s", "prompt": "x", "a": ' % MODEL.encode() + b"[" * depth + b"]" * depth + b"}"


def chat(*content_parts) -> bytes:
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": list(content_parts)}]}).encode()


CASES = [
    ("/v1/completions", b'{"model": "sim-coder", "prompt": "a\\ud800b"}', "invalid_json"),
    ("/v1/completions", b'{"model": "sim-coder", "prompt": "x", "stop": ["\\udc00"]}', "invalid_json"),
    ("/v1/completions", b'{"model": "sim-coder", "prompt": "a\xed\xa0\x80b"}', "invalid_json"),
    ("/v1/chat/completions", b'{"model": "sim-coder", "messages": [{"role": "user", "content": "\\ud83d"}]}',
     "invalid_json"),
    ("/v1/completions", '{"model": "sim-coder", "prompt": "\ud800"}'.encode("utf-16", "surrogatepass"), "invalid_json"),
    ("/v1/chat/completions", chat({"type": "text", "text": 5}), "invalid_content_part"),
    ("/v1/chat/completions", chat({"type": "text", "text": {"nested": "x"}}), "invalid_content_part"),
    ("/v1/chat/completions", chat({"type": "image_url", "image_url": {"url": "https://x/a.png"}, "text": 1}),
     "invalid_content_part"),
    ("/v1/completions", nested(900), "invalid_json"),
    ("/v1/completions", nested(100_000), "invalid_json"),
    ("/v1/completions", b'{"model": "sim-coder", "prompt": "x", "stream": true, "stream_options": []}',
     "invalid_stream_options"),
]


@pytest.mark.parametrize("path, body, code", CASES, ids=[f"{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_what_were_500s_are_openai_shaped_400s(server, alice, echo, path, body, code):
    response = server.post(path, alice.key.raw, body, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", code) and error["message"]
    assert echo.bodies == []
    assert wait_for(lambda: usage_rows(request_id=response.headers["x-request-id"]), 5)  # metered once


def test_a_secret_as_role_is_refused_and_reaches_neither_engine_nor_usage_row(server, alice, echo):
    body = {"model": MODEL, "messages": [{"role": SY_KEY, "content": "hi"}]}
    response = server.post("/v1/chat/completions", alice.key.raw, body)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_role"
    assert SY_KEY not in response.text and echo.bodies == []
    row = wait_for(lambda: usage_rows(request_id=response.headers["x-request-id"]), 5)[0]
    assert SY_KEY not in row.redacted_prompt + row.model_name


def test_an_unknown_model_holding_a_secret_is_echoed_stored_and_counted_redacted(server, alice, echo):
    response = server.post("/v1/completions", alice.key.raw, {"model": f"coder {AWS_KEY}", "prompt": "x"})
    assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"
    assert AWS_KEY not in response.text and "[REDACTED:aws_access_key]" in response.text
    row = wait_for(lambda: usage_rows(request_id=response.headers["x-request-id"]), 5)[0]
    assert row.model_name == "coder [REDACTED:aws_access_key]"
    assert AWS_KEY not in server.app.metrics.render().decode()


def test_secrets_in_non_text_parts_tools_and_stop_are_redacted_before_the_engine(server, alice, echo):
    body = {"model": MODEL, "max_tokens": 2, "stop": [f"# {AWS_KEY}"], "user": SY_KEY,
            "tools": [{"type": "function", "function": {"name": "f", "description": f"key {AWS_KEY}"}}],
            "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": f"https://b.s3.amazonaws.com/a.png?X-Amz-Credential={AWS_KEY}"}},
                {"type": "refusal", "refusal": f"no {SY_KEY}"}, {"type": "input_text", "text": f"use {AWS_KEY}"}]}]}
    response = server.post("/v1/chat/completions", alice.key.raw, body)
    assert response.status_code == 200
    sent = json.dumps(echo.bodies[-1])
    assert AWS_KEY not in sent and SY_KEY not in sent and sent.count("[REDACTED:") == 6
    row = wait_for(lambda: usage_rows(request_id=response.headers["x-request-id"]), 5)[0]
    assert row.redactions == 6 and "use [REDACTED:aws_access_key]" in row.redacted_prompt


def test_with_redaction_off_the_engine_gets_the_prompt_but_the_stored_sample_is_redacted(server, alice, echo):
    update_tenant(alice.tenant, redaction_mode=RedactionMode.OFF, actor=SYSTEM)
    server.wait_synced()
    response = server.post("/v1/completions", alice.key.raw, {"model": MODEL, "prompt": f"key = {AWS_KEY}"})
    assert response.status_code == 200 and echo.bodies[-1]["prompt"] == f"key = {AWS_KEY}"
    row = wait_for(lambda: usage_rows(request_id=response.headers["x-request-id"]), 5)[0]
    assert row.redacted_prompt == "key = [REDACTED:aws_access_key]" and row.redactions == 0


def test_an_unknown_path_is_echoed_redacted(server, alice):
    response = server.post(f"/v1/{SY_KEY}", alice.key.raw, {})
    assert response.status_code == 404 and SY_KEY not in response.text
