"""A stream under a token budget is cut once its choices together generated what was reserved,
counted by the usage the engine reports on every chunk, or by its text when it reports none — even
from an engine that ignores max_tokens and sends several tokens per chunk."""
from __future__ import annotations

import json

import httpx
import pytest

from quotas.services import create_quota_policy
from tests.factories import SYSTEM
from tests.gateway_app.conftest import inference_key, wait_for
from tests.gateway_app.helpers import EchoEngine, add_deployment, make_model_version, read_request, usage_rows

pytestmark = pytest.mark.django_db(transaction=True)
MODEL = "runaway-coder"
TOKENS_PER_CHUNK = 5
CHUNKS = 200  # per choice: far past any cap


class RunawayEngine(EchoEngine):
    """A stand-in engine that ignores max_tokens: every choice streams CHUNKS chunks of 5 tokens each,
    with vLLM's running usage when asked for it (or never, `reports_usage=False`). Keeps the bodies."""

    def __init__(self, reports_usage: bool = True):
        self.reports_usage = reports_usage
        super().__init__(MODEL)

    async def _app(self, scope, receive, send) -> None:
        request = json.loads(await read_request(receive))
        self.bodies.append(request)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        running = (request.get("stream_options") or {}).get("continuous_usage_stats") and self.reports_usage
        for step in range(1, CHUNKS + 1):
            events = b""
            for index in range(request.get("n") or 1):
                chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
                         "choices": [{"index": index, "delta": {"content": "abcde"}, "finish_reason": None}]}
                if running:
                    chunk["usage"] = {"prompt_tokens": 9, "total_tokens": 9 + 5 * step,
                                      "completion_tokens": TOKENS_PER_CHUNK * step}
                events += b"data: " + json.dumps(chunk).encode() + b"\n\n"
            try:
                await send({"type": "http.response.body", "body": events, "more_body": True})
            except OSError:
                return
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


@pytest.fixture(params=[True, False], ids=["running-usage", "no-usage"])
def runaway(request, audit_head):
    engine = RunawayEngine(reports_usage=request.param)
    add_deployment(make_model_version(MODEL), tenant=None, name="runaway", urls=[engine.url])
    yield engine
    engine.stop()


def test_a_stream_is_cut_at_what_its_choices_may_generate(gateway, tenant_a, runaway):
    key = inference_key(tenant_a)
    create_quota_policy(tenant=tenant_a, api_key=key.api_key, actor=SYSTEM, monthly_token_budget=5000)
    server = gateway()
    server.wait_until_serving(key.raw, MODEL)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "go"}], "n": 3, "max_tokens": 20, "stream": True}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=30,
                      headers={"authorization": f"Bearer {key.raw}"}) as response:
        text = response.read().decode()
    assert response.status_code == 200 and "budget_exceeded" in text  # the stream ended with the cut's error
    sent = [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: {") and '"choices"' in line]
    assert all("usage" not in event for event in sent)  # running usage the gateway asked for is not passed on
    assert 3 * 20 // TOKENS_PER_CHUNK - 3 <= len(sent) <= 3 * 20 // TOKENS_PER_CHUNK
    assert runaway.bodies[0]["stream_options"]["continuous_usage_stats"] is True
    rid = response.headers["x-request-id"]
    (row,) = wait_for(lambda: usage_rows(request_id=rid), timeout=5)
    # Billed: the 60 tokens reserved for the three choices, and at most the chunk that went past them.
    assert 60 < row.completion_tokens <= 60 + TOKENS_PER_CHUNK and row.outcome == "rate_limited"
    # No final usage came: the prompt is billed as the running usage reported it (else the estimate).
    assert row.prompt_tokens == (9 if runaway.reports_usage else 1)


def test_the_engine_is_told_each_choices_length_under_a_budget(gateway, tenant_a, runaway):
    key = inference_key(tenant_a)
    create_quota_policy(tenant=tenant_a, api_key=key.api_key, actor=SYSTEM, monthly_token_budget=50_000)
    server = gateway()
    server.wait_until_serving(key.raw, MODEL)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "go"}], "n": 2, "stream": True}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=30,
                      headers={"authorization": f"Bearer {key.raw}"}) as response:
        response.read()
    assert runaway.bodies[0]["max_tokens"] == 1024  # what was reserved per choice, told to the engine
